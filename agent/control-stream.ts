import { backoffDelay } from '../lib/backoff.js';
import type { Clock } from '../lib/clock.js';
import { loadAgentProto, type ChannelSecurity, type grpc } from '../lib/grpc.js';
import { abandonUnlessConnected, attemptChannelOptions, controlPlaneClient, type ControlPlaneTarget } from '../lib/control-plane-client.js';
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
  // A fresh channel per attempt, rebuilt also when the certificate changed.
  const client = controlPlaneClient(opts.target, opts.security, (address, creds) => new proto.fulcrum.v1.AgentService(address, creds, attemptChannelOptions) as AgentServiceClient);
  const log = opts.logger.child({ component: 'control-stream' });
  const heartbeatMs = opts.heartbeatMs ?? 3000;
  let call: grpc.ClientDuplexStream<AgentReport, AgentDesired__Output> | undefined;
  let connected = false;
  let closed = false;
  let attempt = 0;
  let reconnectTimer: NodeJS.Timeout | undefined;
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

  const send = (hello: boolean, heartbeat: boolean) => {
    if (!call) return;
    try {
      call.write(envelope(hello, heartbeat));
    } catch (err) {
      log.warn({ err }, 'report not sent');
    }
  };

  const scheduleReconnect = (backOff: boolean, lost: { why: string; address: string }) => {
    if (closed || reconnectTimer) return;
    // The next replica at once; our backoff once every replica failed (lib/control-plane-client.ts).
    const delay = backOff ? backoffDelay(attempt++) : 0;
    log.info({ ...lost, delayMs: delay, attempt, next: client.address }, 'control plane stream lost; reconnecting');
    reconnectTimer = setTimeout(() => {
      reconnectTimer = undefined;
      open();
    }, delay);
    reconnectTimer.unref();
  };

  const open = () => {
    if (closed) return;
    const address = client.address;
    const channel = client.get();
    const c = channel.Stream();
    call = c;
    abandonUnlessConnected(channel, c, () => call === c);
    let dead = false;
    const onGone = (why: string, err?: unknown) => {
      if (dead) return;
      dead = true;
      if (call === c) call = undefined;
      setConnected(false);
      if (closed) return;
      const detail = err instanceof Error ? `${why}: ${err.message}` : why;
      scheduleReconnect(client.failed(), { why: detail, address });
    };
    let held = false;
    c.on('data', (msg: AgentDesired__Output) => {
      if (!held) {
        held = true;
        log.info({ address }, 'control plane stream connected');
      }
      attempt = 0;
      client.succeeded();
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
    send(true, false);
  };

  const heartbeat = setInterval(() => send(false, true), heartbeatMs);
  heartbeat.unref();
  open();

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
      try {
        call?.cancel();
      } catch {
        // The stream may already be gone.
      }
    },
    async close() {
      closed = true;
      clearInterval(heartbeat);
      if (reconnectTimer) clearTimeout(reconnectTimer);
      if (notifyTimer) clearTimeout(notifyTimer);
      try {
        call?.end();
        call?.cancel();
      } catch {
        // The stream may already be gone.
      }
      client.close();
    },
  };
}
