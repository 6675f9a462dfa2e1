import type { Clock } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigSpec } from '../config/model.js';
import type { DbEndpointSpec } from '../config/endpoint-model.js';
import type { DbEndpoint } from '../endpoints/db-endpoint.js';
import type { DbEndpointSet } from '../endpoints/endpoint-set.js';
import type { ConfigRuntime } from '../runtime/config-runtime.js';
import type { ConnLimits } from '../throttle/conn-limits.js';
import { Listener, type SharedAdmission } from './listener.js';
import { UdpListener } from './udp-listener.js';
import type { WildcardPorts } from './wildcard-ports.js';

/** A listen key a commit wants served, with the config and the address it listens on. */
export interface WantedListener {
  c: ConfigSpec;
  ip: string;
}

/** Sockets a commit bound before its swap: installed by the swap, or closed if it is abandoned. */
export interface BoundListeners {
  readonly fresh: readonly (Listener | UdpListener)[];
  readonly endpoints: DbEndpoint[];
  /** The database endpoints to serve from the swap on (null: unchanged). */
  readonly eps: readonly DbEndpointSpec[] | null;
}

export interface ListenerSetOptions {
  clock: Clock;
  log: Logger;
  limits: ConnLimits;
  /** False for the workers' primary: it binds nothing (docs/dataplane.md, "Workers"). */
  bind: boolean;
  endpoints: DbEndpointSet;
  /** One socket per port on the wildcard address (listeners/wildcard-ports.ts), or null. */
  ports: WildcardPorts | null;
  shared?: SharedAdmission;
  udpSocket?: (ip: string, port: number) => Promise<object>;
  /** Udp datagrams through the native relay when it loads (default true; EngineOptions.udpNative). */
  udpNative?: boolean;
}

/**
 * Every socket the engine listens on, by listen key (`ip:port`), and the database endpoints:
 * binding new ones before a swap (all or none), handing each its config's runtime, draining the
 * ones that leave, and the descriptor count the connection limits budget with. What is served
 * where is the served state's (served-state.ts); the engine's commit orchestrates the two.
 */
export class ListenerSet {
  private readonly listeners = new Map<string, Listener | UdpListener>();
  private udpListeners = 0;

  constructor(private readonly o: ListenerSetOptions) {}

  get size(): number {
    return this.listeners.size;
  }

  get endpoints(): DbEndpointSet {
    return this.o.endpoints;
  }

  /**
   * Binds every wanted key not bound yet, and the new database endpoints of `eps` (null: leave
   * them), in parallel: a snapshot of thousands of NodeBalancers must not bind one by one. If
   * one fails nothing stays bound and it throws invalid_config naming every failure.
   */
  async bindNew(wanted: ReadonlyMap<string, WantedListener>, eps: readonly DbEndpointSpec[] | null): Promise<BoundListeners> {
    const { clock, log, limits, bind } = this.o;
    const fresh: (Listener | UdpListener)[] = [];
    for (const [key, { c, ip }] of wanted) {
      if (this.listeners.has(key) || !bind) continue;
      fresh.push(c.protocol === 'udp' ? new UdpListener(ip, c.port, clock, log, limits, this.o.udpSocket, this.o.udpNative ?? true) : new Listener(ip, c.port, clock, log, limits, this.o.shared, this.o.ports));
    }
    const binds = await Promise.allSettled(fresh.map((l) => l.listen()));
    const failed = binds.flatMap((r, i) => (r.status === 'rejected' ? [`${fresh[i]!.key}: ${(r.reason as NodeJS.ErrnoException).code ?? (r.reason as Error).message}`] : []));
    // A process that binds nothing (the workers' primary) serves no database endpoint either.
    const bound = eps && bind ? await this.o.endpoints.bind(eps) : { fresh: [], failed: [] };
    failed.push(...bound.failed);
    const out = { fresh, endpoints: bound.fresh, eps };
    if (failed.length > 0) {
      this.abandon(out);
      throw new FulcrumError('invalid_config', `cannot listen on ${failed.join(', ')}`);
    }
    return out;
  }

  /** Closes what `bindNew` bound for a commit that will not swap. */
  abandon(b: BoundListeners): void {
    for (const l of b.fresh) l.destroy();
    for (const e of b.endpoints) e.close();
  }

  /** The swap's first step: the fresh listeners join the set (they serve once `complete` runs). */
  install(b: BoundListeners): void {
    for (const l of b.fresh) {
      this.listeners.set(l.key, l);
      if (l instanceof UdpListener) this.udpListeners++;
    }
  }

  /** Hands config `c`'s listeners (ipv4 and ipv6) its runtime. */
  attach(c: ConfigSpec, rt: ConfigRuntime): void {
    if (rt.tls) Listener.attachTls(rt);
    // A process that binds nothing (the workers' primary) has no listener to hand the runtime.
    for (const key of [c.listenKey, c.listenKey6]) {
      const l = key === '' ? undefined : this.listeners.get(key);
      if (l) l.rt = rt;
    }
  }

  /**
   * Brings the udp listeners' natively relayed bytes into their configs' counters, so a reading of
   * the counters (telemetry's deltas, /metrics) includes them (UdpListener.collect).
   */
  collectUdp(): void {
    if (this.udpListeners === 0) return;
    for (const l of this.listeners.values()) if (l instanceof UdpListener) l.collect();
  }

  /** A listen key no config serves any more: its listener stops accepting and drains. */
  release(key: string, drainTimeoutMs: number): void {
    const l = this.listeners.get(key);
    if (!l) return;
    this.listeners.delete(key);
    if (l instanceof UdpListener) this.udpListeners--;
    l.rt = null;
    void l.drain(drainTimeoutMs);
  }

  /** The swap's last step: the endpoints change, the fresh listeners serve, the budget is counted again. */
  complete(b: BoundListeners): void {
    if (b.eps && this.o.bind) this.o.endpoints.swap(b.eps, b.endpoints);
    for (const l of b.fresh) if (l instanceof Listener) l.serve();
    // Descriptors held: with wildcard listeners one per port, and the udp listeners (each binds its address).
    const { ports } = this.o;
    this.o.limits.listeners = (ports === null ? this.listeners.size : ports.size + this.udpListeners) + this.o.endpoints.size;
  }

  /** Stops accepting everywhere; resolves once every listener's connections ended or were cut at the deadline. */
  async drain(deadlineMs: number): Promise<void> {
    this.o.endpoints.stopAccepting();
    await Promise.all([...this.listeners.values()].map((l) => l.drain(deadlineMs)));
    this.listeners.clear();
    this.o.endpoints.close();
  }

  /** Immediate stop. */
  close(): void {
    for (const l of this.listeners.values()) l.destroy();
    this.listeners.clear();
    this.o.endpoints.close();
  }
}
