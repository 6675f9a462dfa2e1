/**
 * How a data plane or agent dials the control plane: a list of replica addresses, one fresh
 * gRPC channel per connection attempt, and only our own backoff between attempts
 * (docs/architecture.md, "The streams").
 */
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
