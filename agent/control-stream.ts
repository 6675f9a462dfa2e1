import type { Clock } from '../lib/clock.js';
import { loadAgentProto, type ChannelSecurity, type grpc } from '../lib/grpc.js';
import { attemptChannelOptions, controlPlaneClient, reconnectingStream, type ControlPlaneTarget } from '../lib/control-plane-client.js';
import type { Logger } from '../lib/logger.js';
import type { AgentDesired__Output } from '../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentReport } from '../proto/gen/fulcrum/v1/AgentReport.js';
import type { AgentServiceClient } from '../proto/gen/fulcrum/v1/AgentService.js';

export interface ControlStreamOptions {
  /** The control plane's gRPC replicas (host:port, or a list): the stream moves to the next one when lost. */
  target: ControlPlaneTarget;
  /** mTLS with the agent's certificate (or plain gRPC with --insecure-grpc). */
  security: ChannelSecurity;
  agentId: string;
  region: string;
  logger: Logger;
  clock: Clock;
  /** Interval of heartbeat reports. */
  heartbeatMs?: number;
  /** The current observation, without the envelope fields (agentId, region, atMs, hello, heartbeat). */
  observe: () => Omit<AgentReport, 'agentId' | 'region' | 'atMs' | 'hello' | 'heartbeat'>;
  /** Called with every desired-state message, in order. */
  onDesired: (desired: AgentDesired__Output) => void;
  onConnectedChange?: (connected: boolean) => void;
}

export interface ControlStream {
  /** Sends a full (non-heartbeat) report soon; coalesces bursts of calls. */
  notify(): void;
  readonly connected: boolean;
  /** Reopens the stream (after a certificate renewal: the new channel presents the new one). */
  reconnect(): void;
  close(): Promise<void>;
}

/**
 * The agent's end of AgentService.Stream: hello, reports on change, heartbeats, and a
 * jittered reconnect (lib/backoff) when the control plane goes away. While disconnected the
 * agent keeps converging on its last desired state (static stability).
 */
export function createControlStream(opts: ControlStreamOptions): ControlStream {
  const proto = loadAgentProto();
  const log = opts.logger.child({ component: 'control-stream' });
  const heartbeatMs = opts.heartbeatMs ?? 3000;
  let connected = false;
  let notifyTimer: NodeJS.Timeout | undefined;

  const envelope = (hello: boolean, heartbeat: boolean): AgentReport => ({
    ...opts.observe(),
    agentId: opts.agentId,
    region: opts.region,
    atMs: opts.clock.now(),
    hello,
    heartbeat,
  });

  const setConnected = (v: boolean) => {
    if (connected === v) return;
    connected = v;
    opts.onConnectedChange?.(v);
  };

  const send = (hello: boolean, heartbeat: boolean, call = stream.call) => {
    if (!call) return;
    try {
      call.write(envelope(hello, heartbeat));
    } catch (err) {
      log.warn({ err }, 'report not sent');
    }
  };

  const stream = reconnectingStream({
    // A fresh channel per attempt, rebuilt also when the certificate changed.
    client: controlPlaneClient(opts.target, opts.security, (address, creds) => new proto.fulcrum.v1.AgentService(address, creds, attemptChannelOptions) as AgentServiceClient),
    open: (channel, attempt): grpc.ClientDuplexStream<AgentReport, AgentDesired__Output> => {
      const c = channel.Stream();
      const onGone = (why: string, err?: unknown) => attempt.lost(err instanceof Error ? `${why}: ${err.message}` : why);
      let held = false;
      c.on('data', (msg: AgentDesired__Output) => {
        if (!held) {
          held = true;
          log.info({ address: attempt.address }, 'control plane stream connected');
        }
        attempt.held();
        setConnected(true);
        try {
          opts.onDesired(msg);
        } catch (err) {
          log.error({ err }, 'desired state handler failed');
        }
      });
      c.on('error', (err) => onGone('error', err));
      c.on('end', () => onGone('end'));
      c.on('close', () => onGone('close'));
      c.on('metadata', () => setConnected(true));
      send(true, false, c);
      return c;
    },
    onGone: () => setConnected(false),
    onLost: ({ why, address, next, delay, attempt }) => log.info({ why, address, delayMs: delay, attempt, next }, 'control plane stream lost; reconnecting'),
    unrefTimer: true,
  });

  const heartbeat = setInterval(() => send(false, true), heartbeatMs);
  heartbeat.unref();
  stream.start();

  return {
    notify() {
      if (notifyTimer) return;
      notifyTimer = setTimeout(() => {
        notifyTimer = undefined;
        send(false, false);
      }, 50);
      notifyTimer.unref();
    },
    get connected() {
      return connected;
    },
    reconnect() {
      stream.reconnect();
    },
    async close() {
      clearInterval(heartbeat);
      if (notifyTimer) clearTimeout(notifyTimer);
      stream.close((call) => {
        try {
          call.end();
          call.cancel();
        } catch {
          // The stream may already be gone.
        }
      });
      setConnected(false);
    },
  };
}
