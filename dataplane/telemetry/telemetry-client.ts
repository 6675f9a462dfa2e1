import { loadConfigProto, type grpc, type ChannelSecurity } from '../../lib/grpc.js';
import { attemptChannelOptions, controlPlaneClient, reconnectingStream, type ControlPlaneTarget, type ReconnectingStream } from '../../lib/control-plane-client.js';
import { systemClock, type Clock, type Timer } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { TelemetryServiceClient } from '../../proto/gen/fulcrum/v1/TelemetryService.js';
import type { TelemetryReport } from '../../proto/gen/fulcrum/v1/TelemetryReport.js';
import type { HealthEvent, TelemetrySource } from './telemetry-source.js';

export interface TelemetryClientOptions {
  id: string;
  /** The control plane's replicas; the client moves to the next one when its stream is lost. */
  address: ControlPlaneTarget;
  /** mTLS with the data plane's certificate (or plain gRPC with --insecure-grpc). */
  security: ChannelSecurity;
  /** The engine: health transitions and counter deltas. */
  source: TelemetrySource;
  logger: Logger;
  /** How often counter deltas are sent (default 2 s). */
  intervalMs?: number;
  clock?: Clock;
}

/**
 * TelemetryService.Report: health transitions go out as they happen (batched per tick of the
 * event loop), counter deltas every interval. On every (re)connect the full set of node statuses
 * is sent first. Counters are only drained while a stream is open, so deltas accumulate in the
 * engine while the control plane is away instead of being lost.
 */
export class TelemetryClient {
  private readonly stream: ReconnectingStream<grpc.ClientWritableStream<TelemetryReport>>;
  private readonly tick: Timer;
  private pendingHealth: HealthEvent[] = [];
  private flushScheduled = false;
  private readonly unsubscribe: () => void;
  private readonly clock: Clock;

  constructor(private readonly o: TelemetryClientOptions) {
    this.clock = o.clock ?? systemClock;
    const proto = loadConfigProto();
    this.stream = reconnectingStream({
      client: controlPlaneClient(o.address, o.security, (address, creds) => new proto.fulcrum.v1.TelemetryService(address, creds, attemptChannelOptions) as unknown as TelemetryServiceClient),
      open: (channel, attempt) => {
        const call = channel.Report((err) => attempt.lost(err?.message ?? 'ended'));
        call.on('error', () => undefined);
        this.pendingHealth = [];
        call.write({ dataplaneId: this.o.id, health: this.o.source.healthSnapshot().map(toWire), counters: [] });
        return call;
      },
      // The server answers a Report only when it ends, so the stream counts as healthy once it is
      // connected and still open a second later (not refused at once); reset backoff then. A call
      // that merely waits for a replica that never answers is not healthy.
      onConnected: (attempt) => this.clock.setTimeout(() => attempt.held(), 1000),
      onLost: ({ why, delay, address, next }) => this.o.logger.warn({ why, delay, address, next }, 'telemetry stream lost; reconnecting'),
      // A plain (ref'd) timer on purpose, like the config client's: a data plane waiting for its
      // control plane must not exit for lack of anything else to wait on.
      unrefTimer: false,
    });
    this.unsubscribe = o.source.onHealth((ev) => {
      this.pendingHealth.push(ev);
      if (!this.flushScheduled) {
        this.flushScheduled = true;
        setImmediate(() => this.flushHealth());
      }
    });
    this.tick = this.clock.setInterval(() => this.sendCounters(), o.intervalMs ?? 2000);
  }

  start(): void {
    this.stream.start();
  }

  /** Reopens the stream (after a certificate renewal: the new channel presents the new one). */
  reconnect(): void {
    this.stream.reconnect();
  }

  private write(report: TelemetryReport): void {
    this.stream.call?.write(report);
  }

  private flushHealth(): void {
    this.flushScheduled = false;
    if (this.stream.call === null || this.pendingHealth.length === 0) {
      this.pendingHealth = [];
      return;
    }
    const health = this.pendingHealth.map(toWire);
    this.pendingHealth = [];
    this.write({ dataplaneId: this.o.id, health, counters: [] });
  }

  private sendCounters(): void {
    if (this.stream.call === null) return;
    const deltas = this.o.source.drainCounters();
    if (deltas.length === 0) return;
    this.write({
      dataplaneId: this.o.id,
      health: [],
      counters: deltas.map((d) => ({ nodebalancerId: d.nodebalancerId, configId: d.configId, bytesIn: d.bytesIn, bytesOut: d.bytesOut, connections: d.connections, atMs: d.atMs })),
    });
  }

  close(): void {
    this.unsubscribe();
    this.tick.cancel();
    this.stream.close((call) => {
      // Send what is left before going.
      const deltas = this.o.source.drainCounters();
      if (deltas.length > 0) call.write({ dataplaneId: this.o.id, health: [], counters: deltas });
      call.end();
    });
  }
}

function toWire(ev: HealthEvent) {
  return { nodebalancerId: ev.nodebalancerId, configId: ev.configId, nodeId: ev.nodeId, status: ev.status, atMs: ev.atMs };
}
