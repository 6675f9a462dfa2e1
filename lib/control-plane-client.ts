/**
 * How a data plane or agent dials the control plane: a list of replica addresses, one fresh
 * gRPC channel per connection attempt, and only our own backoff between attempts
 * (docs/architecture.md, "The streams").
 */
import { backoffDelay } from './backoff.js';
import { channelOptions, type grpc, type ChannelSecurity } from './grpc.js';

/** Where the control plane is: `host:port`, or several replicas as `host1:port,host2:port`. */
export type ControlPlaneTarget = string | readonly string[];

/** The replica addresses of a target; throws naming the bad entry. */
export function controlPlaneAddresses(target: ControlPlaneTarget): string[] {
  const list = (typeof target === 'string' ? target.split(',') : [...target]).map((a) => a.trim()).filter(Boolean);
  if (list.length === 0) throw new Error('--control-plane needs at least one host:port');
  if (list.length > 16) throw new Error('--control-plane takes at most 16 addresses');
  for (const a of list) {
    const m = /^(\[[0-9a-fA-F:.]+\]|[A-Za-z0-9.-]+):(\d{1,5})$/.exec(a);
    if (!m || Number(m[2]) < 1 || Number(m[2]) > 65_535) throw new Error(`--control-plane: "${a}" is not host:port`);
  }
  return list;
}

/** The host part of `host:port` (brackets of an IPv6 literal removed). */
export function hostOf(address: string): string {
  const i = address.lastIndexOf(':');
  const host = i === -1 ? address : address.slice(0, i);
  return host.replace(/^\[|\]$/g, '');
}

/** A gRPC client to one replica at a time. */
export interface ControlPlaneClient<T> {
  /** The client for this attempt: built on first use, after `failed()` and after a renewal. */
  get(): T;
  /** The replica the current (or next) client dials. */
  readonly address: string;
  /**
   * The stream on the current client ended or never held: close that channel and dial the next
   * replica (the same one when there is only one) on a new channel next time. True when every
   * replica failed since the last success (back off now); false while one is left to try at once.
   */
  failed(): boolean;
  /** The stream carried a message: the next failure starts a new round of the list. */
  succeeded(): void;
  close(): void;
}

/**
 * A fresh channel per attempt, because grpc-js keeps a reconnect backoff of its own per
 * subchannel (1 s growing by 1.6 up to 2 min): on a channel that failed to connect, calls made
 * while that backoff runs fail at once without dialling, so after an outage the first stream
 * that can hold waits for grpc-js's timer, not ours. A new channel with its own subchannel pool
 * dials as soon as a call is made, so each of our attempts is one real connection attempt.
 */
export function controlPlaneClient<T extends { close(): void }>(
  target: ControlPlaneTarget,
  security: ChannelSecurity,
  make: (address: string, credentials: grpc.ChannelCredentials) => T,
): ControlPlaneClient<T> {
  const addresses = controlPlaneAddresses(target);
  let index = 0;
  let failedInRound = 0;
  let client: T | undefined;
  let generation = -1;
  const drop = () => {
    client?.close();
    client = undefined;
  };
  return {
    get() {
      if (!client || generation !== security.generation) {
        drop();
        generation = security.generation;
        client = make(addresses[index]!, security.credentials());
      }
      return client;
    },
    get address() {
      return addresses[index]!;
    },
    failed() {
      drop();
      index = (index + 1) % addresses.length;
      failedInRound++;
      if (failedInRound < addresses.length) return false;
      failedInRound = 0;
      return true;
    },
    succeeded() {
      failedInRound = 0;
    },
    close: drop,
  };
}

/**
 * How long one attempt may take to reach a working connection (TCP, TLS and HTTP/2 set up).
 * grpc-js sets no limit of its own: a replica whose host vanished drops the SYN (the kernel
 * retries for minutes), and a frozen replica's kernel completes TCP but no TLS answer ever
 * comes, so without a limit one such replica in the list holds the stream for good. The same
 * 5 s the keepalive gives a live connection to answer a ping (lib/grpc.ts).
 */
export const CONNECT_TIMEOUT_MS = 5_000;

/**
 * Cancels `call` (so it fails like any lost stream, and the next replica is tried) when its
 * channel is not connected within CONNECT_TIMEOUT_MS; `current` says the call is still the one
 * in use, and `onConnected` hears when the channel is connected in time. Real time on purpose:
 * the peer's handshake runs in real time.
 */
export function abandonUnlessConnected(
  client: { waitForReady(deadline: Date | number, callback: (error?: Error) => void): void },
  call: { cancel(): void },
  current: () => boolean,
  opts: { timeoutMs?: number; onConnected?: () => void } = {},
): void {
  client.waitForReady(Date.now() + (opts.timeoutMs ?? CONNECT_TIMEOUT_MS), (err) => {
    if (!current()) return;
    if (err) call.cancel();
    else opts.onConnected?.();
  });
}

/** lib/grpc.ts's channel options, and no subchannel (nor its backoff) shared with another channel. */
export const attemptChannelOptions: grpc.ChannelOptions = { ...channelOptions, 'grpc.use_local_subchannel_pool': 1 };

/** One attempt of a reconnecting stream: the call it opened and what the caller reports about it. */
export interface StreamAttempt {
  /** The replica this attempt dials. */
  readonly address: string;
  /** This attempt is still the stream in use (not lost, replaced nor closed). */
  current(): boolean;
  /** The stream proved to work: backoff and the round of replicas start again. */
  held(): void;
  /** The stream ended or failed: dial the next replica (after our backoff once all failed). */
  lost(why: string): void;
}

/** What a reconnecting stream reports when its stream is lost and it schedules the next attempt. */
export interface StreamLoss {
  why: string;
  /** The replica that was lost, and the one the next attempt dials. */
  address: string;
  next: string;
  /** Milliseconds until the next attempt (0 while a replica is left to try in this round). */
  delay: number;
  /** Attempts since the last success, this one counted. */
  attempt: number;
}

export interface ReconnectingStreamOptions<C, S> {
  client: ControlPlaneClient<C>;
  /** Opens the call on this attempt's channel, attaches its handlers and writes its first message. */
  open(channel: C, attempt: StreamAttempt): S;
  /** Heard when the channel connected within CONNECT_TIMEOUT_MS (the attempt is still current). */
  onConnected?(attempt: StreamAttempt): void;
  /** Heard once per attempt when it is lost, also after close. */
  onGone?(): void;
  /** Heard when a lost stream is to be reopened (not after close): where to log why. */
  onLost(loss: StreamLoss): void;
  /** True to put off opening now; the caller calls start() again when ready. */
  deferOpen?(): boolean;
  /** Unref the reconnect timer (the agent), or keep the process alive while it waits (the data plane). */
  unrefTimer?: boolean;
}

export interface ReconnectingStream<S> {
  /** Opens the stream (again, after a deferral). */
  start(): void;
  /** The call in use, or null between attempts. */
  readonly call: S | null;
  /** Cancels the call in use: it is lost like any other and a new one is opened. */
  reconnect(): void;
  /** Stops reconnecting, lets `finish` end the call in use (if any), then closes the channel. */
  close(finish: (call: S) => void): void;
}

/**
 * The loop the config stream, the telemetry stream and the agent stream share: one call at a
 * time on a fresh channel (controlPlaneClient), abandoned unless connected in time, the next
 * replica at once when it is lost and our jittered backoff (lib/backoff) once every replica failed
 * since the last time a stream held (docs/architecture.md, "Several control-plane addresses").
 */
export function reconnectingStream<C extends Parameters<typeof abandonUnlessConnected>[0], S extends { cancel(): void }>(
  opts: ReconnectingStreamOptions<C, S>,
): ReconnectingStream<S> {
  const client = opts.client;
  let current: { attempt: StreamAttempt; call: S | null } | null = null;
  let failures = 0;
  let stopped = false;
  let timer: NodeJS.Timeout | undefined;

  const open = () => {
    if (stopped || opts.deferOpen?.()) return;
    const address = client.address;
    const channel = client.get();
    const attempt: StreamAttempt = {
      address,
      current: () => current?.attempt === attempt,
      held: () => {
        if (current?.attempt !== attempt) return;
        failures = 0;
        client.succeeded();
      },
      lost: (why) => {
        if (current?.attempt !== attempt) return;
        current = null;
        opts.onGone?.();
        if (stopped || timer) return;
        const delay = client.failed() ? backoffDelay(failures++) : 0;
        opts.onLost({ why, address, next: client.address, delay, attempt: failures });
        timer = setTimeout(() => {
          timer = undefined;
          open();
        }, delay);
        if (opts.unrefTimer) timer.unref();
      },
    };
    const slot: { attempt: StreamAttempt; call: S | null } = { attempt, call: null };
    current = slot;
    const call = opts.open(channel, attempt);
    slot.call = call;
    abandonUnlessConnected(channel, call, attempt.current, { onConnected: () => opts.onConnected?.(attempt) });
  };

  return {
    start: open,
    get call() {
      return current?.call ?? null;
    },
    reconnect() {
      try {
        current?.call?.cancel();
      } catch {
        // The stream may already be gone.
      }
    },
    close(finish) {
      stopped = true;
      if (timer) clearTimeout(timer);
      timer = undefined;
      const call = current?.call;
      current = null;
      if (call) finish(call);
      client.close();
    },
  };
}
