import { clientKey, DEFAULT_CLIENT_IPV6_PREFIX } from '../../lib/client-key.js';
import type { Clock } from '../../lib/clock.js';
import { systemClock } from '../../lib/clock.js';
import { ConcurrencyCap } from '../../lib/conn-cap.js';
import type { ConnThrottle } from './conn-throttle.js';
import { SessionRate } from './session-rate.js';

/** Why a client connection was refused at accept (the `reason` label of the refusal metric). */
export type RefusalReason = 'fd_reserve' | 'nodebalancer_cap' | 'client_cap' | 'client_total_cap' | 'throttle'
  | 'udp_fd_reserve' | 'udp_nodebalancer_cap' | 'udp_client_cap' | 'udp_client_total_cap' | 'udp_config_cap' | 'udp_throttle' | 'udp_rate';

/**
 * How many UDP sessions weigh as much as one connection in the per-client total
 * (`client_total_cap`, docs/security/traffic.md "UDP"). A session holds one descriptor and no
 * backend connection, and a DNS-style client holds thousands of one-exchange sessions at once;
 * 16 makes the default total (1,000 connections) 16,000 sessions, the per-client allowance of one
 * premium NodeBalancer, so a busy client still fits on one, and no longer on each of many.
 */
export const UDP_SESSIONS_PER_CONNECTION = 16;

/** The data plane's connection limits (docs/dataplane.md "Connection limits"); 0 disables a cap. */
export interface ConnLimitOptions {
  /** Concurrent connections of one client (lib/client-key.ts) to one NodeBalancer (all its ports). Default 100. */
  perClientPerNodeBalancer?: number;
  /**
   * Concurrent connections of one client to the whole data plane, UDP sessions counted in at
   * 1/UDP_SESSIONS_PER_CONNECTION each. Default 1,000.
   */
  perClient?: number;
  /** IPv6 clients are keyed by this prefix (lib/client-key.ts). Default 64. */
  clientIpv6Prefix?: number;
  /** New UDP sessions a second of one client, over the whole data plane (0 = no limit). Default 2,500. */
  udpNewSessionsPerSecond?: number;
  /** Clients whose new-session rate is tracked at once. Default 100,000. */
  udpRateKeys?: number;
  /** Concurrent connections to one NodeBalancer, as the real service caps it. Default 10,000. */
  perNodeBalancer?: number;
  /** The process's descriptor limit (Infinity = unknown: no descriptor budget). */
  fdLimit?: number;
  /** Descriptors kept for the control channel, health checks, pools and listeners' slack. */
  fdReserve?: number;
  /** tcp configs: a session with no byte either way on a side for this long is closed. Default 50 s. */
  tcpIdleTimeoutMs?: number;
  /** Open UDP sessions of one client IP to one NodeBalancer. Default 2,000. */
  udpSessionsPerClient?: number;
  /** Open UDP sessions of a common NodeBalancer (a premium one gets 8 times as many). Default 10,000. */
  udpSessionsPerNodeBalancer?: number;
  /**
   * How many processes read each udp port (workers, docs/dataplane.md "UDP on every worker"):
   * the kernel spreads one client's flows over them, and each keeps a 1/udpShare part of every
   * UDP limit, so their sum is the limit. Default 1.
   */
  udpShare?: number;
}

export const DEFAULT_LIMITS = {
  perClientPerNodeBalancer: 100, perClient: 1000, perNodeBalancer: 10_000, tcpIdleTimeoutMs: 50_000,
  udpSessionsPerClient: 2000, udpSessionsPerNodeBalancer: 10_000, udpNewSessionsPerSecond: 2500, udpRateKeys: 100_000,
};

/** The new-session bucket holds two seconds of the rate: a client's burst, not a sustained flood. */
const UDP_RATE_BURST_SECONDS = 2;

/** The reserve for a descriptor limit: a tenth of it, at least 1,024. */
export function defaultFdReserve(fdLimit: number): number {
  return Math.max(1024, Math.floor(fdLimit / 10));
}

/**
 * Admission at accept, across the whole data plane: the descriptor budget, then the
 * NodeBalancer's caps (kept beside its rate throttle, one per NodeBalancer), then the client's
 * cap over every NodeBalancer, then client_conn_throttle. A refused connection is counted by
 * reason (plain numbers, read by /metrics at scrape time). Every per-client limit keys on
 * `key(address)` (lib/client-key.ts): callers pass the key, never the raw address.
 */
export class ConnLimits {
  readonly perClientPerNodeBalancer: number;
  readonly perNodeBalancer: number;
  readonly tcpIdleTimeoutMs: number;
  readonly udpSessionsPerClient: number;
  readonly udpSessionsPerNodeBalancer: number;
  readonly clientIpv6Prefix: number;
  /** Open UDP sessions, each holding one descriptor (its socket towards the node). */
  udpSessions = 0;
  /** Open client connections (tcp, http, https). */
  private tcpOpen = 0;
  private readonly fdLimit: number;
  private readonly fdReserve: number;
  /** Per client over the data plane, in units: a connection is UDP_SESSIONS_PER_CONNECTION, a UDP session 1. */
  private readonly perClient: ConcurrencyCap;
  private readonly udpRate: SessionRate;
  /** Processes reading each udp port; also what a UDP session weighs in this process's client total. */
  private readonly udpShare: number;
  /** Listening sockets (each holds a descriptor); set by the engine after every swap. */
  listeners = 0;
  readonly refused: Record<RefusalReason, number> = {
    fd_reserve: 0, nodebalancer_cap: 0, client_cap: 0, client_total_cap: 0, throttle: 0,
    udp_fd_reserve: 0, udp_nodebalancer_cap: 0, udp_client_cap: 0, udp_client_total_cap: 0, udp_config_cap: 0, udp_throttle: 0, udp_rate: 0,
  };

  constructor(opts: ConnLimitOptions = {}, clock: Clock = systemClock) {
    this.perClientPerNodeBalancer = opts.perClientPerNodeBalancer ?? DEFAULT_LIMITS.perClientPerNodeBalancer;
    this.perNodeBalancer = opts.perNodeBalancer ?? DEFAULT_LIMITS.perNodeBalancer;
    this.tcpIdleTimeoutMs = opts.tcpIdleTimeoutMs ?? DEFAULT_LIMITS.tcpIdleTimeoutMs;
    this.udpSessionsPerClient = opts.udpSessionsPerClient ?? DEFAULT_LIMITS.udpSessionsPerClient;
    this.udpSessionsPerNodeBalancer = opts.udpSessionsPerNodeBalancer ?? DEFAULT_LIMITS.udpSessionsPerNodeBalancer;
    this.fdLimit = opts.fdLimit ?? Infinity;
    this.fdReserve = opts.fdReserve ?? (Number.isFinite(this.fdLimit) ? defaultFdReserve(this.fdLimit) : 0);
    this.perClient = new ConcurrencyCap((opts.perClient ?? DEFAULT_LIMITS.perClient) * UDP_SESSIONS_PER_CONNECTION, 0);
    this.clientIpv6Prefix = opts.clientIpv6Prefix ?? DEFAULT_CLIENT_IPV6_PREFIX;
    this.udpShare = Math.max(1, Math.floor(opts.udpShare ?? 1));
    const rate = this.udpPart(opts.udpNewSessionsPerSecond ?? DEFAULT_LIMITS.udpNewSessionsPerSecond);
    this.udpRate = new SessionRate(rate, rate * UDP_RATE_BURST_SECONDS, opts.udpRateKeys ?? DEFAULT_LIMITS.udpRateKeys, clock);
  }

  /**
   * This process's part of a UDP limit (0 = off stays off). Never below 1: a limit smaller than
   * the number of workers becomes 1 per worker, so up to `udpShare` over the data plane.
   */
  udpPart(limit: number): number {
    return limit <= 0 ? limit : Math.max(1, Math.floor(limit / this.udpShare));
  }

  /** The key every per-client limit counts `address` under (lib/client-key.ts). */
  key(address: string): string {
    return clientKey(address, this.clientIpv6Prefix);
  }

  /** Client connections open now. */
  get open(): number {
    return this.tcpOpen;
  }

  /** Clients whose new-session rate is tracked now. */
  get udpRateKeys(): number {
    return this.udpRate.size;
  }

  /**
   * Counts the connection in, or says no (and counts the refusal). A proxied connection holds
   * two descriptors (client and backend), so clients may use what is left of the limit after the
   * listeners and the reserve, halved. `throttle` false: client_conn_throttle is decided
   * elsewhere (a worker asks the primary, docs/dataplane.md "Workers").
   */
  admit(nb: ConnThrottle, key: string, throttle = true): boolean {
    if (2 * (this.tcpOpen + 1) + this.udpSessions + this.listeners + this.fdReserve > this.fdLimit) return this.refuse('fd_reserve');
    const nbCap = nb.concurrent.check(key);
    if (nbCap !== null) return this.refuse(nbCap === 'total' ? 'nodebalancer_cap' : 'client_cap');
    if (this.perClient.check(key, UDP_SESSIONS_PER_CONNECTION) !== null) return this.refuse('client_total_cap');
    if (throttle && !nb.allow(key)) return this.refuse('throttle');
    nb.concurrent.add(key);
    this.perClient.add(key, UDP_SESSIONS_PER_CONNECTION);
    this.tcpOpen++;
    return true;
  }

  release(nb: ConnThrottle, key: string): void {
    nb.concurrent.release(key);
    this.perClient.release(key, UDP_SESSIONS_PER_CONNECTION);
    this.tcpOpen--;
  }

  /**
   * A new UDP session (docs/dataplane.md "UDP"): the descriptor budget, then the NodeBalancer's
   * session caps (kept in `nb`, the NodeBalancer's UDP gate), then the client's total over the
   * data plane (shared with its connections), then the client's new-session rate over the data
   * plane, then client_udp_sess_throttle. Only an admitted session counts in either rate.
   */
  admitUdp(nb: ConnThrottle, key: string): boolean {
    if (2 * this.tcpOpen + this.udpSessions + 1 + this.listeners + this.fdReserve > this.fdLimit) return this.refuse('udp_fd_reserve');
    const cap = nb.concurrent.check(key);
    if (cap !== null) return this.refuse(cap === 'total' ? 'udp_nodebalancer_cap' : 'udp_client_cap');
    // A session weighs udpShare in this process's part of the client total: its UDP sessions
    // alone stop at 1/udpShare of the data plane's (TCP connections stay per process, "Workers").
    if (this.perClient.check(key, this.udpShare) !== null) return this.refuse('udp_client_total_cap');
    if (!this.udpRate.take(key)) return this.refuse('udp_rate');
    if (!nb.allow(key)) {
      this.udpRate.refund(key);
      return this.refuse('udp_throttle');
    }
    nb.concurrent.add(key);
    this.perClient.add(key, this.udpShare);
    this.udpSessions++;
    return true;
  }

  releaseUdp(nb: ConnThrottle, key: string): void {
    nb.concurrent.release(key);
    this.perClient.release(key, this.udpShare);
    this.udpSessions--;
  }

  /** Counts a refusal decided elsewhere (a config's own session cap). */
  refuse(reason: RefusalReason): false {
    this.refused[reason]++;
    return false;
  }
}
