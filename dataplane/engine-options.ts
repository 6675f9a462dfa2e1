import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { SharedAdmission } from './listeners/listener.js';
import type { RemoteHealth } from './runtime/config-runtime.js';
import type { ConnLimitOptions } from './throttle/conn-limits.js';
import type { DbEndpointSetOptions } from './endpoints/endpoint-set.js';
import type { TicketKeys } from './runtime/ticket-keys.js';

/** What createProxyEngine (engine.ts) takes. */
export interface EngineOptions {
  logger?: Logger;
  clock?: Clock;
  /** How long a removed listener's open connections may run on (default 30 s). */
  drainTimeoutMs?: number;
  /** Connection caps, descriptor budget and tcp idle timeout (throttle/conn-limits.ts). */
  limits?: ConnLimitOptions;
  /** Database endpoints: the source address of member connections and the endpoint caps. */
  endpoints?: DbEndpointSetOptions;
  /**
   * Multi-process data plane (docs/dataplane.md, "Workers"). `bind: false` is the primary's
   * engine: configs, health checks and stickiness rules without a listener. A worker takes
   * health from the primary (`remoteHealth`), asks it at accept (`shared`), and reads its own
   * socket of each udp port's reuseport group, which the primary holds (`udpSocket`).
   */
  bind?: boolean;
  remoteHealth?: RemoteHealth;
  shared?: SharedAdmission;
  /** Where a udp listener gets its bound socket (workers/udp-group.ts); default: it binds one itself. */
  udpSocket?: (ip: string, port: number) => Promise<object>;
  /**
   * Udp listeners relay established flows in the native datagram path (dataplane/native,
   * docs/dataplane.md "UDP: the native datagram path") when its addon loads; node:dgram is the
   * fallback, logged as an error. Default true; false keeps node:dgram (A/B benches).
   */
  udpNative?: boolean;
  /**
   * One listening socket per port on the wildcard address, connections dispatched by the
   * address they reached (listeners/wildcard-ports.ts); only when the data plane owns its ports
   * on every address of the host (docs/dataplane.md, "Wildcard listeners").
   */
  wildcard?: boolean;
  /** The data plane's TLS ticket secret (shared by its workers); default: one of this engine's own. */
  ticketKeys?: TicketKeys;
}
