import { ConcurrencyCap } from '../../lib/conn-cap.js';
import type { ConnThrottle } from './conn-throttle.js';

/** Why a client connection was refused at accept (the `reason` label of the refusal metric). */
export type RefusalReason = 'fd_reserve' | 'nodebalancer_cap' | 'client_cap' | 'client_total_cap' | 'throttle'
  | 'udp_fd_reserve' | 'udp_nodebalancer_cap' | 'udp_client_cap' | 'udp_config_cap' | 'udp_throttle';

/** The data plane's connection limits (docs/dataplane.md "Connection limits"); 0 disables a cap. */
export interface ConnLimitOptions {
  /** Concurrent connections of one client IP to one NodeBalancer (all its ports). Default 100. */
  perClientPerNodeBalancer?: number;
  /** Concurrent connections of one client IP to the whole data plane. Default 1,000. */
  perClient?: number;
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
}

export const DEFAULT_LIMITS = {
  perClientPerNodeBalancer: 100, perClient: 1000, perNodeBalancer: 10_000, tcpIdleTimeoutMs: 50_000,
  udpSessionsPerClient: 2000, udpSessionsPerNodeBalancer: 10_000,
};

/** The reserve for a descriptor limit: a tenth of it, at least 1,024. */
export function defaultFdReserve(fdLimit: number): number {
  return Math.max(1024, Math.floor(fdLimit / 10));
}

/**
 * Admission at accept, across the whole data plane: the descriptor budget, then the
 * NodeBalancer's caps (kept beside its rate throttle, one per NodeBalancer), then the client IP's
 * cap over every NodeBalancer, then client_conn_throttle. A refused connection is counted by
 * reason (plain numbers, read by /metrics at scrape time).
 */
export class ConnLimits {
  readonly perClientPerNodeBalancer: number;
  readonly perNodeBalancer: number;
  readonly tcpIdleTimeoutMs: number;
  readonly udpSessionsPerClient: number;
  readonly udpSessionsPerNodeBalancer: number;
  /** Open UDP sessions, each holding one descriptor (its socket towards the node). */
  udpSessions = 0;
  private readonly fdLimit: number;
  private readonly fdReserve: number;
  private readonly perClient: ConcurrencyCap;
  /** Listening sockets (each holds a descriptor); set by the engine after every swap. */
  listeners = 0;
  readonly refused: Record<RefusalReason, number> = {
    fd_reserve: 0, nodebalancer_cap: 0, client_cap: 0, client_total_cap: 0, throttle: 0,
    udp_fd_reserve: 0, udp_nodebalancer_cap: 0, udp_client_cap: 0, udp_config_cap: 0, udp_throttle: 0,
  };

  constructor(opts: ConnLimitOptions = {}) {
    this.perClientPerNodeBalancer = opts.perClientPerNodeBalancer ?? DEFAULT_LIMITS.perClientPerNodeBalancer;
    this.perNodeBalancer = opts.perNodeBalancer ?? DEFAULT_LIMITS.perNodeBalancer;
    this.tcpIdleTimeoutMs = opts.tcpIdleTimeoutMs ?? DEFAULT_LIMITS.tcpIdleTimeoutMs;
    this.udpSessionsPerClient = opts.udpSessionsPerClient ?? DEFAULT_LIMITS.udpSessionsPerClient;
    this.udpSessionsPerNodeBalancer = opts.udpSessionsPerNodeBalancer ?? DEFAULT_LIMITS.udpSessionsPerNodeBalancer;
    this.fdLimit = opts.fdLimit ?? Infinity;
    this.fdReserve = opts.fdReserve ?? (Number.isFinite(this.fdLimit) ? defaultFdReserve(this.fdLimit) : 0);
    this.perClient = new ConcurrencyCap(opts.perClient ?? DEFAULT_LIMITS.perClient, 0);
  }

  /** Client connections open now. */
  get open(): number {
    return this.perClient.size;
  }

  /**
   * Counts the connection in, or says no (and counts the refusal). A proxied connection holds
   * two descriptors (client and backend), so clients may use what is left of the limit after the
   * listeners and the reserve, halved. `throttle` false: client_conn_throttle is decided
   * elsewhere (a worker asks the primary, docs/dataplane.md "Workers").
   */
  admit(nb: ConnThrottle, ip: string, throttle = true): boolean {
    if (2 * (this.perClient.size + 1) + this.udpSessions + this.listeners + this.fdReserve > this.fdLimit) return this.refuse('fd_reserve');
    const nbCap = nb.concurrent.check(ip);
    if (nbCap !== null) return this.refuse(nbCap === 'total' ? 'nodebalancer_cap' : 'client_cap');
    if (this.perClient.check(ip) !== null) return this.refuse('client_total_cap');
    if (throttle && !nb.allow(ip)) return this.refuse('throttle');
    nb.concurrent.add(ip);
    this.perClient.add(ip);
    return true;
  }

  release(nb: ConnThrottle, ip: string): void {
    nb.concurrent.release(ip);
    this.perClient.release(ip);
  }

  /**
   * A new UDP session (docs/dataplane.md "UDP"): the descriptor budget, then the NodeBalancer's
   * session caps, then client_udp_sess_throttle, all kept in `nb` (the NodeBalancer's UDP gate).
   */
  admitUdp(nb: ConnThrottle, ip: string): boolean {
    if (2 * this.perClient.size + this.udpSessions + 1 + this.listeners + this.fdReserve > this.fdLimit) return this.refuse('udp_fd_reserve');
    const cap = nb.concurrent.check(ip);
    if (cap !== null) return this.refuse(cap === 'total' ? 'udp_nodebalancer_cap' : 'udp_client_cap');
    if (!nb.allow(ip)) return this.refuse('udp_throttle');
    nb.concurrent.add(ip);
    this.udpSessions++;
    return true;
  }

  releaseUdp(nb: ConnThrottle, ip: string): void {
    nb.concurrent.release(ip);
    this.udpSessions--;
  }

  /** Counts a refusal decided elsewhere (a config's own session cap). */
  refuse(reason: RefusalReason): false {
    this.refused[reason]++;
    return false;
  }
}
