import { randomUUID } from 'node:crypto';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadConfigProto, onStreamGone } from '../../lib/grpc.js';
import type { Registry } from 'prom-client';
import { Gauge, Counter } from 'prom-client';
import type { ConfigAck__Output } from '../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot } from '../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import type { TelemetryReport__Output } from '../../proto/gen/fulcrum/v1/TelemetryReport.js';
import type { TelemetryAck } from '../../proto/gen/fulcrum/v1/TelemetryAck.js';
import type { DataplaneRepository, KeyValueRepository } from '../store/ports.js';
import type { NodeBalancerRepository } from '../store/nodebalancer-repository.js';
import type { StatsService } from '../domain/nodebalancers/stats-service.js';
import { buildAll, hashNodeBalancers } from './snapshot-builder.js';

interface Subscriber {
  id: string;
  region: string;
  call: grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>;
  sentHash?: string;
  pending?: { nonce: string; version: number };
}

export interface ConfigServerDeps {
  repo: NodeBalancerRepository;
  dataplanes: DataplaneRepository;
  kv: KeyValueRepository;
  stats: StatsService;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Changes arriving within this window are sent as one snapshot. */
  coalesceMs?: number;
}

/**
 * The control plane's side of the data-plane protocol (DESIGN §4): full snapshots with a
 * version and nonce, ACK/NACK per nonce, per-data-plane status, and the telemetry stream that
 * feeds node status and traffic counters. Versions are persisted so that they keep increasing
 * across control-plane restarts; identical content keeps its version and is not resent.
 */
export class ConfigPushServer {
  private readonly subs = new Map<string, Subscriber>();
  private timer: NodeJS.Timeout | undefined;
  private readonly log: Logger;
  private readonly gConnected: Gauge;
  private readonly gVersion: Gauge;
  private readonly cNacks: Counter;

  constructor(private readonly d: ConfigServerDeps) {
    this.log = d.logger.child({ component: 'config-push' });
    this.gConnected = new Gauge({ name: 'fulcrum_dataplanes_connected', help: 'Data planes with an open config stream', registers: [d.registry] });
    this.gVersion = new Gauge({ name: 'fulcrum_dataplane_config_version_applied', help: 'Config version each data plane has ACKed', labelNames: ['dataplane'], registers: [d.registry] });
    this.cNacks = new Counter({ name: 'fulcrum_dataplane_config_nacks_total', help: 'Snapshots rejected by data planes', labelNames: ['dataplane'], registers: [d.registry] });
    // A restart leaves no stream open: nothing is connected until it says hello again.
    for (const s of d.dataplanes.list()) if (s.connected) d.dataplanes.upsert({ ...s, connected: false });
  }

  register(server: grpc.Server): void {
    const proto = loadConfigProto();
    server.addService(proto.fulcrum.v1.ConfigService.service, { Stream: (call: any) => this.onStream(call) });
    server.addService(proto.fulcrum.v1.TelemetryService.service, { Report: (call: any, cb: any) => this.onTelemetry(call, cb) });
  }

  /** Schedules a snapshot for every connected data plane; bursts are coalesced. */
  notifyChanged(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      const round = this.buildRound();
      for (const s of this.subs.values()) this.push(s, round);
    }, this.d.coalesceMs ?? 10);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    for (const s of this.subs.values()) s.call.end();
    this.subs.clear();
  }

  private versionFor(hash: string): number {
    const lastHash = this.d.kv.get('config_hash');
    let version = Number(this.d.kv.get('config_version') ?? '0');
    if (lastHash !== hash) {
      version += 1;
      this.d.kv.set('config_version', String(version));
      this.d.kv.set('config_hash', hash);
    }
    return version;
  }

  /** The whole desired state, built once per push round and shared by every data plane. */
  private buildRound(): { all: ReturnType<typeof buildAll>; version: number } {
    const all = buildAll(this.d.repo);
    // One global version for identical global content; regional subsets share the counter.
    return { all, version: this.versionFor(hashNodeBalancers(all.map((x) => x.nb))) };
  }

  private push(s: Subscriber, round = this.buildRound()): void {
    const nodebalancers = round.all.filter((x) => s.region === '*' || x.region === s.region).map((x) => x.nb);
    const hash = hashNodeBalancers(nodebalancers);
    if (hash === s.sentHash) return;
    const version = round.version;
    const nonce = randomUUID();
    s.sentHash = hash;
    s.pending = { nonce, version };
    s.call.write({ version, nonce, nodebalancers });
    this.log.debug({ dataplane: s.id, version }, 'snapshot sent');
  }

  private onStream(call: grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>): void {
    let sub: Subscriber | undefined;
    const now = () => this.d.clock.now();
    call.on('data', (msg: ConfigAck__Output) => {
      if (!sub) {
        const id = msg.dataplaneId || `anonymous-${randomUUID().slice(0, 8)}`;
        this.subs.get(id)?.call.end();
        sub = { id, region: msg.region || '*', call };
        this.subs.set(id, sub);
        const prev = this.d.dataplanes.get(id);
        this.d.dataplanes.upsert({
          id, region: sub.region, connected: true, versionApplied: Number(msg.versionApplied ?? 0),
          lastError: prev?.lastError ?? null, lastErrorAt: prev?.lastErrorAt ?? null, lastSeen: now(),
        });
        this.gConnected.set(this.subs.size);
        this.log.info({ dataplane: id, region: sub.region, version: msg.versionApplied }, 'data plane connected');
        this.push(sub);
        return;
      }
      if (!msg.responseNonce || msg.responseNonce !== sub.pending?.nonce) return; // stale answer
      const prev = this.d.dataplanes.get(sub.id)!;
      if (msg.errorDetail) {
        this.cNacks.inc({ dataplane: sub.id });
        this.log.warn({ dataplane: sub.id, error: msg.errorDetail, version: sub.pending.version }, 'snapshot NACKed');
        // Forget what was sent so that the next change (or reconnect) retries.
        sub.sentHash = undefined;
        this.d.dataplanes.upsert({ ...prev, connected: true, versionApplied: Number(msg.versionApplied ?? prev.versionApplied), lastError: msg.errorDetail, lastErrorAt: now(), lastSeen: now() });
      } else {
        this.d.dataplanes.upsert({ ...prev, connected: true, versionApplied: Number(msg.versionApplied), lastError: null, lastErrorAt: null, lastSeen: now() });
        this.gVersion.set({ dataplane: sub.id }, Number(msg.versionApplied));
      }
      sub.pending = undefined;
    });
    const gone = () => {
      if (!sub || this.subs.get(sub.id) !== sub) return;
      this.subs.delete(sub.id);
      this.gConnected.set(this.subs.size);
      const prev = this.d.dataplanes.get(sub.id);
      if (prev) this.d.dataplanes.upsert({ ...prev, connected: false, lastSeen: now() });
      this.log.info({ dataplane: sub.id }, 'data plane disconnected');
    };
    onStreamGone(call, gone);
  }

  private onTelemetry(call: grpc.ServerReadableStream<TelemetryReport__Output, TelemetryAck>, cb: grpc.sendUnaryData<TelemetryAck>): void {
    call.on('data', (r: TelemetryReport__Output) => {
      try {
        for (const h of r.health ?? []) {
          if (h.status !== 'UP' && h.status !== 'DOWN') continue;
          const node = this.d.repo.node(Number(h.configId), Number(h.nodeId));
          if (node) this.d.repo.setNodeStatus(node.id, h.status);
        }
        for (const c of r.counters ?? []) {
          const delta = { bytesIn: Number(c.bytesIn), bytesOut: Number(c.bytesOut), connections: Number(c.connections) };
          if (delta.bytesIn === 0 && delta.bytesOut === 0 && delta.connections === 0) continue;
          this.d.stats.record(Number(c.nodebalancerId), Number(c.configId), Number(c.atMs) || this.d.clock.now(), delta);
        }
      } catch (err) {
        this.log.error({ err }, 'telemetry report could not be stored');
      }
    });
    call.on('end', () => cb(null, {}));
    call.on('error', () => undefined);
  }
}
