import type { Clock } from '../../lib/clock.js';
import type { ConfigSpec } from '../config/model.js';
import type { NodeState } from './node-state.js';
import type { TrafficCounters } from './traffic-counters.js';

/**
 * All a session (listeners/tcp-session.ts, listeners/http-session.ts) may see and do of the
 * config it was accepted on. Node state, health and counters are written only behind these
 * calls, so what a connection changes is in one place (runtime/config-runtime.ts). Every member
 * is a plain call or field: nothing here allocates per request.
 */
export interface SessionConfig {
  readonly spec: ConfigSpec;
  readonly clock: Clock;
  readonly traffic: TrafficCounters;
  /** This process is draining (a reload): responses carry `Connection: close`. */
  readonly draining: boolean;
  /**
   * A node for a new connection (tcp) or request (http), stickiness first; undefined when
   * nothing can serve. `exclude` holds the nodes that already failed this attempt.
   */
  choose(ip: string, hash: number, pinned: NodeState | undefined, exclude: ReadonlySet<NodeState> | null): NodeState | undefined;
  /** The node an NB_SRVID cookie value names, when the config uses http_cookie stickiness. */
  pinnedBy(cookie: string): NodeState | undefined;
  /** A connection (tcp) or request (http) to `node` starts / ends (leastconn's in-flight count). */
  opened(node: NodeState): void;
  closed(node: NodeState): void;
  /**
   * Real traffic reached `node` and it answered (a tcp connect, a final http response that is not
   * a failure, a udp reply): a node nothing had seen yet is UP from now on.
   */
  seen(node: NodeState): void;
  /** Real traffic failed on `node` (passive health check, health/passive.ts). */
  failed(node: NodeState, reason: string): void;
}
