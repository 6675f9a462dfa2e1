import { systemClock, type Clock } from '../lib/clock.js';
import { FulcrumError } from '../lib/errors.js';
import { silentLogger, type Logger } from '../lib/logger.js';
import type { ConfigSpec } from './config/model.js';
import { validateSnapshot, type SnapshotInput } from './config/validate.js';
import { Listener, type SharedAdmission } from './listeners/listener.js';
import { UdpListener } from './listeners/udp-listener.js';
import { ConfigRuntime, type RemoteHealth } from './runtime/config-runtime.js';
import { ConnThrottle } from './throttle/conn-throttle.js';
import { ConnLimits, type ConnLimitOptions } from './throttle/conn-limits.js';
import type { CounterDelta, HealthEvent, TelemetrySource } from './telemetry/telemetry-source.js';
import type { MetricsSource } from './telemetry/metrics.js';
import { DbEndpointSet, type DbEndpointSetOptions } from './endpoints/endpoint-set.js';
import type { DbEndpoint } from './endpoints/db-endpoint.js';

export type { CounterDelta, HealthEvent };

/**
 * The proxy without any control-plane wiring: give it snapshots, read health and counters.
 * Contract:
 * - apply() validates the whole snapshot, binds any new listener, then swaps atomically; on any
 *   problem it throws FulcrumError('invalid_config') and the previous snapshot keeps serving.
 *   Applies are serialised.
 * - onHealth() callbacks receive every node UP/DOWN transition as it happens.
 * - drainCounters() returns per-config deltas since the previous call (and resets them).
 * - close() stops everything; idempotent.
 */
export interface ProxyEngine extends TelemetrySource, MetricsSource {
  apply(snapshot: SnapshotInput): Promise<void>;
  /** Version of the snapshot being served (0 = none yet). */
  version(): number;
  /** The addresses of the snapshot being served (NodeBalancers' ipv4 and database endpoints'), sorted, distinct. */
  addresses(): string[];
  close(): Promise<void>;
  /** The database endpoints being served (docs/databases.md, "Database endpoints"). */
  databaseEndpoints(): Iterable<DbEndpoint>;
  /** A worker: node statuses decided by the primary (docs/dataplane.md, "Workers"). */
  setHealth(events: readonly Pick<HealthEvent, 'configId' | 'nodeId' | 'status'>[]): void;
  /** The primary: a worker saw real traffic fail on a node (passive check). */
  passive(configId: number, nodeId: number, reason: string): void;
  /**
   * A worker being replaced: stop accepting, tell http clients to reconnect, give open
   * connections until the deadline, then cut them. Resolves when none are left.
   */
  drain(deadlineMs: number): Promise<void>;
}

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
   * health from the primary (`remoteHealth`), asks it at accept (`shared`), and serves udp
   * only when `serveUdp` (one worker does: a client flow must stay in one process).
   */
  bind?: boolean;
  remoteHealth?: RemoteHealth;
  shared?: SharedAdmission;
  serveUdp?: boolean;
}

export function createProxyEngine(opts: EngineOptions = {}): ProxyEngine {
  const log = (opts.logger ?? silentLogger()).child({ component: 'engine' });
  const clock = opts.clock ?? systemClock;
  const drainTimeoutMs = opts.drainTimeoutMs ?? 30_000;
  const listeners = new Map<string, Listener | UdpListener>();
  const runtimes = new Map<number, ConfigRuntime>();
  const throttles = new Map<number, ConnThrottle>();
  // Per NodeBalancer as well: client_udp_sess_throttle and the UDP session caps (docs/dataplane.md "UDP").
  const udpGates = new Map<number, ConnThrottle>();
  const limits = new ConnLimits(opts.limits);
  const endpoints = new DbEndpointSet(log, opts.endpoints);
  const bind = opts.bind ?? true;
  const serveUdp = opts.serveUdp ?? true;
  const healthSubs = new Set<(ev: HealthEvent) => void>();
  // Removed configs whose connections still run: their bytes are still reported.
  const retired = new Set<ConfigRuntime>();
  let version = 0;
  let served: string[] = [];
  let chain: Promise<void> = Promise.resolve();
  let closed = false;

  const emit = (ev: HealthEvent): void => {
    for (const cb of healthSubs) {
      try {
        cb(ev);
      } catch (err) {
        log.error({ err }, 'health subscriber failed');
      }
    }
  };

  const takeDelta = (rt: ConfigRuntime): CounterDelta | null => {
    const t = rt.traffic;
    if (!t.hasDelta) return null;
    const d = { nodebalancerId: rt.spec.nodebalancerId, configId: rt.spec.id, bytesIn: t.deltaIn, bytesOut: t.deltaOut, connections: t.deltaConns, atMs: clock.now() };
    t.resetDelta();
    return d;
  };

  async function applyNow(input: SnapshotInput): Promise<void> {
    if (closed) throw new FulcrumError('invalid_config', 'engine is closed');
    let snap;
    try {
      snap = validateSnapshot(input);
    } catch (e) {
      if (e instanceof FulcrumError) throw e;
      // A snapshot of the wrong shape altogether (not arrays where arrays belong, ...).
      throw new FulcrumError('invalid_config', `malformed snapshot: ${(e as Error).message}`);
    }
    // Every config listens on its NodeBalancer's ipv4 and, when it has one, its ipv6.
    const wanted = new Map<string, { c: ConfigSpec; ip: string }>();
    for (const nb of snap.nodebalancers) {
      for (const c of nb.configs) {
        wanted.set(c.listenKey, { c, ip: c.ip });
        if (c.listenKey6 !== '') wanted.set(c.listenKey6, { c, ip: c.ip6 });
      }
    }

    // Bind every new address first; if one fails nothing changes.
    const fresh: (Listener | UdpListener)[] = [];
    for (const [key, { c, ip }] of wanted) {
      if (listeners.has(key) || !bind || (c.protocol === 'udp' && !serveUdp)) continue;
      fresh.push(c.protocol === 'udp' ? new UdpListener(ip, c.port, clock, log, limits) : new Listener(ip, c.port, clock, log, limits, opts.shared));
    }
    // Bound in parallel: a snapshot of thousands of NodeBalancers must not bind one by one.
    const binds = await Promise.allSettled(fresh.map((l) => l.listen()));
    const failed = binds.flatMap((r, i) => (r.status === 'rejected' ? [`${fresh[i].key}: ${(r.reason as NodeJS.ErrnoException).code ?? (r.reason as Error).message}`] : []));
    const eps = bind ? await endpoints.bind(snap.databaseEndpoints) : { fresh: [], failed: [] };
    failed.push(...eps.failed);
    if (failed.length > 0) {
      for (const l of fresh) l.destroy();
      for (const e of eps.fresh) e.close();
      throw new FulcrumError('invalid_config', `cannot listen on ${failed.join(', ')}`);
    }

    // Swap (synchronous from here: no connection sees a half-applied snapshot).
    for (const l of fresh) listeners.set(l.key, l);
    const seenNb = new Set<number>();
    for (const nb of snap.nodebalancers) {
      seenNb.add(nb.id);
      const t = throttles.get(nb.id);
      if (t) t.limit = nb.clientConnThrottle;
      else throttles.set(nb.id, new ConnThrottle(nb.clientConnThrottle, clock, limits.perClientPerNodeBalancer, limits.perNodeBalancer));
      const u = udpGates.get(nb.id);
      if (u) u.limit = nb.clientUdpSessThrottle;
      else udpGates.set(nb.id, new ConnThrottle(nb.clientUdpSessThrottle, clock, limits.udpSessionsPerClient, limits.udpSessionsPerNodeBalancer));
      // A premium NodeBalancer may hold what the service states: 10x the connections, 8x the UDP sessions.
      const premium = nb.type === 'premium';
      throttles.get(nb.id)!.concurrent.total = limits.perNodeBalancer * (premium ? 10 : 1);
      udpGates.get(nb.id)!.concurrent.total = limits.udpSessionsPerNodeBalancer * (premium ? 8 : 1);
    }
    for (const id of throttles.keys()) if (!seenNb.has(id)) throttles.delete(id);
    for (const id of udpGates.keys()) if (!seenNb.has(id)) udpGates.delete(id);
    const seenCfg = new Set<number>();
    for (const nb of snap.nodebalancers) {
      for (const c of nb.configs) {
        seenCfg.add(c.id);
        let rt = runtimes.get(c.id);
        const udp = c.protocol === 'udp';
        if (rt && rt.spec.nodebalancerId === c.nodebalancerId && (rt.spec.protocol === 'udp') === udp) {
          rt.update(c);
        } else {
          if (rt) retire(rt);
          rt = new ConfigRuntime(c, (udp ? udpGates : throttles).get(nb.id)!, clock, log.child({ configId: c.id }), emit, opts.remoteHealth);
          runtimes.set(c.id, rt);
        }
        if (rt.tls) Listener.attachTls(rt);
        // A process that binds nothing (the workers' primary) has no listener to hand the runtime.
        for (const key of [c.listenKey, c.listenKey6]) {
          const l = key === '' ? undefined : listeners.get(key);
          if (l) l.rt = rt;
        }
      }
    }
    for (const [id, rt] of runtimes) if (!seenCfg.has(id)) retire(rt);
    for (const [key, l] of listeners) {
      if (wanted.has(key)) continue;
      listeners.delete(key);
      l.rt = null;
      void l.drain(drainTimeoutMs);
    }
    if (bind) endpoints.swap(snap.databaseEndpoints, eps.fresh);
    for (const l of fresh) if (l instanceof Listener) l.serve();
    limits.listeners = listeners.size + endpoints.size;
    version = snap.version;
    // Keepalived holds every address served here: NodeBalancers' and database endpoints', so
    // hosts.primary moves with the pair (docs/multi-host.md).
    served = [...new Set([...snap.nodebalancers.map((nb) => nb.ipv4), ...snap.databaseEndpoints.map((e) => e.address)])].sort();
    log.info({ version, listeners: listeners.size, configs: runtimes.size, databaseEndpoints: endpoints.size }, 'snapshot applied');
  }

  function retire(rt: ConfigRuntime): void {
    rt.retire();
    runtimes.delete(rt.spec.id);
    retired.add(rt);
  }

  const engine: ProxyEngine = {
    apply(snapshot) {
      const run = chain.then(() => applyNow(snapshot));
      chain = run.catch(() => undefined);
      return run;
    },
    version: () => version,
    addresses: () => served,
    configs: () => runtimes.values(),
    refusals: () => limits.refused,
    openConnections: () => limits.open,
    databaseEndpoints: () => endpoints.all(),
    onHealth(cb) {
      healthSubs.add(cb);
      return () => healthSubs.delete(cb);
    },
    healthSnapshot() {
      const out: HealthEvent[] = [];
      for (const rt of runtimes.values()) out.push(...rt.statuses());
      return out;
    },
    drainCounters() {
      const out: CounterDelta[] = [];
      for (const rt of retired) {
        const d = takeDelta(rt);
        if (d) out.push(d);
        if (rt.traffic.open <= 0) retired.delete(rt);
      }
      for (const rt of runtimes.values()) {
        const d = takeDelta(rt);
        if (d) out.push(d);
      }
      return out;
    },
    setHealth(events) {
      for (const ev of events) runtimes.get(ev.configId)?.setStatusFrom(ev.nodeId, ev.status);
    },
    passive(configId, nodeId, reason) {
      const rt = runtimes.get(configId);
      const node = rt?.nodes.get(nodeId);
      if (rt && node) rt.failed(node, reason);
    },
    async drain(deadlineMs) {
      closed = true;
      await chain;
      for (const rt of [...runtimes.values(), ...retired]) rt.draining = true;
      endpoints.stopAccepting();
      const left = [...listeners.values()].map((l) => l.drain(deadlineMs));
      await Promise.all(left);
      for (const rt of runtimes.values()) rt.retire();
      listeners.clear();
      endpoints.close();
    },
    async close() {
      if (closed) return;
      closed = true;
      await chain;
      for (const rt of runtimes.values()) rt.retire();
      for (const l of listeners.values()) l.destroy();
      listeners.clear();
      endpoints.close();
      runtimes.clear();
    },
  };
  return engine;
}
