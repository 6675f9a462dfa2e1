import { systemClock } from '../lib/clock.js';
import { FulcrumError } from '../lib/errors.js';
import { silentLogger } from '../lib/logger.js';
import type { ConfigSpec, NodeBalancerSpec } from './config/model.js';
import type { DbEndpointSpec } from './config/endpoint-model.js';
import { validateSnapshotSliced, type SnapshotInput } from './config/validate.js';
import { validateDelta, type PreparedSnapshot, type ServedIndex } from './config/validate-delta.js';
import { Listener } from './listeners/listener.js';
import { WildcardPorts } from './listeners/wildcard-ports.js';
import { UdpListener } from './listeners/udp-listener.js';
import { ConfigRuntime } from './runtime/config-runtime.js';
import { TicketKeys } from './runtime/ticket-keys.js';
import { ConnThrottle } from './throttle/conn-throttle.js';
import { ConnLimits } from './throttle/conn-limits.js';
import type { CounterDelta, HealthEvent, TelemetrySource } from './telemetry/telemetry-source.js';
import type { MetricsSource } from './telemetry/metrics.js';
import { DbEndpointSet } from './endpoints/endpoint-set.js';
import type { DbEndpoint } from './endpoints/db-endpoint.js';
import type { EngineOptions } from './engine-options.js';

export type { CounterDelta, HealthEvent, PreparedSnapshot, EngineOptions };

/**
 * A whole state of thousands of NodeBalancers is validated and built in slices of this many
 * NodeBalancers (configs), handing the event loop back in between, so the gRPC streams' keepalive
 * and accepted connections are served meanwhile (docs/dataplane.md, "Large states").
 */
const SLICE = 100;
const pause = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

/**
 * The proxy without any control-plane wiring: give it snapshots, read health and counters.
 * Contract:
 * - apply() validates the whole snapshot (or, for an incremental one, the NodeBalancers it
 *   changes, on top of the version it names), binds any new listener, then swaps atomically; on
 *   any problem it throws FulcrumError('invalid_config') and the previous state keeps serving.
 *   Applies are serialised.
 * - onHealth() callbacks receive every node UP/DOWN transition as it happens.
 * - drainCounters() returns per-config deltas since the previous call (and resets them).
 * - close() stops everything; idempotent.
 */
export interface ProxyEngine extends TelemetrySource, MetricsSource {
  apply(snapshot: SnapshotInput): Promise<void>;
  /**
   * apply() in two halves, for a primary that validates once for its workers: `prepare`
   * validates against what this engine serves (and changes nothing); `commitPrepared` serves
   * a prepared snapshot without validating it again, in this engine or any other serving the
   * same version (docs/dataplane.md, "Workers").
   */
  prepare(snapshot: SnapshotInput): Promise<PreparedSnapshot>;
  commitPrepared(prepared: PreparedSnapshot): Promise<void>;
  /** Everything served now, as one whole prepared snapshot (a new worker starts from it). */
  state(): PreparedSnapshot;
  /** The runtime of a config served now. */
  config(id: number): ConfigRuntime | undefined;
  servesNodeBalancer(id: number): boolean;
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


export function createProxyEngine(opts: EngineOptions = {}): ProxyEngine {
  const log = (opts.logger ?? silentLogger()).child({ component: 'engine' });
  const clock = opts.clock ?? systemClock;
  const drainTimeoutMs = opts.drainTimeoutMs ?? 30_000;
  const listeners = new Map<string, Listener | UdpListener>();
  const runtimes = new Map<number, ConfigRuntime>();
  const throttles = new Map<number, ConnThrottle>();
  // Per NodeBalancer as well: client_udp_sess_throttle and the UDP session caps (docs/dataplane.md "UDP").
  const udpGates = new Map<number, ConnThrottle>();
  const limits = new ConnLimits(opts.limits, clock);
  // The endpoints' caps key clients as the NodeBalancers' do, unless told otherwise.
  const endpoints = new DbEndpointSet(log, { ...opts.endpoints, limits: { clientIpv6Prefix: limits.clientIpv6Prefix, ...opts.endpoints?.limits } });
  const ports = opts.wildcard ? new WildcardPorts(log) : null;
  let udpListeners = 0;
  const bind = opts.bind ?? true;
  const tickets = opts.ticketKeys ?? new TicketKeys();
  const healthSubs = new Set<(ev: HealthEvent) => void>();
  // Removed configs whose connections still run: their bytes are still reported.
  const retired = new Set<ConfigRuntime>();
  // What is served, by NodeBalancer, and who holds each listen key and config id: an
  // incremental snapshot is checked and applied against these without walking everything.
  const nbs = new Map<number, NodeBalancerSpec>();
  const listenOwner = new Map<string, number>();
  const configOwner = new Map<number, number>();
  const servedIndex: ServedIndex = {
    listenOwner: (key) => listenOwner.get(key) ?? (endpoints.has(key) ? 'endpoint' : undefined),
    configOwner: (id) => configOwner.get(id),
  };
  let version = 0;
  let served: string[] = [];
  /**
   * The database endpoints of the last snapshot that named them. Kept apart from the endpoint
   * set: a process that binds nothing (the workers' primary) holds no endpoint, yet its
   * keepalived must hold their addresses.
   */
  let endpointSpecs: readonly DbEndpointSpec[] = [];
  let chain: Promise<void> = Promise.resolve();
  let closed = false;

  const stopRekeying = tickets.onChange(() => {
    for (const rt of runtimes.values()) rt.rekey();
  });

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

  async function prepareNow(input: SnapshotInput): Promise<PreparedSnapshot> {
    if (closed) throw new FulcrumError('invalid_config', 'engine is closed');
    try {
      if (input.incremental === true) {
        const d = validateDelta(input, servedIndex);
        checkBase(d.version, d.baseVersion);
        return { version: d.version, baseVersion: d.baseVersion, nodebalancers: d.nodebalancers, removed: d.removed, databaseEndpoints: d.databaseEndpoints };
      }
      const snap = await validateSnapshotSliced(input, pause, SLICE);
      return { version: snap.version, baseVersion: null, nodebalancers: snap.nodebalancers, removed: [], databaseEndpoints: snap.databaseEndpoints };
    } catch (e) {
      if (e instanceof FulcrumError) throw e;
      // A snapshot of the wrong shape altogether (not arrays where arrays belong, ...).
      throw new FulcrumError('invalid_config', `malformed snapshot: ${(e as Error).message}`);
    }
  }

  function checkBase(next: number, base: number): void {
    if (base !== version) throw new FulcrumError('invalid_config', `incremental snapshot ${next} applies on version ${base}, but version ${version} is served`);
  }

  /** A whole prepared snapshot removes every NodeBalancer it does not name. */
  async function commitNow(p: PreparedSnapshot): Promise<void> {
    if (closed) throw new FulcrumError('invalid_config', 'engine is closed');
    if (p.baseVersion !== null) checkBase(p.version, p.baseVersion);
    const keep = p.baseVersion === null ? new Set(p.nodebalancers.map((nb) => nb.id)) : null;
    const removed = keep === null ? p.removed : [...nbs.keys()].filter((id) => !keep.has(id));
    await commit(p.version, p.nodebalancers, removed, p.databaseEndpoints);
  }

  /** Serialised after every apply before it. */
  function queue<T>(fn: () => Promise<T>): Promise<T> {
    const run = chain.then(fn);
    chain = run.then(() => undefined, () => undefined);
    return run;
  }

  /**
   * Serves `upserts` (added or changed NodeBalancers, each whole) in place of what they were,
   * stops serving `removed`, and replaces the database endpoints unless `eps` is null. Touches
   * only the listeners of those NodeBalancers: a whole snapshot names every one, an incremental
   * one only those that changed (docs/dataplane.md, "Incremental snapshots"). Every config
   * listens on its NodeBalancer's ipv4 and, when it has one, its ipv6.
   */
  async function commit(nextVersion: number, upserts: readonly NodeBalancerSpec[], removed: readonly number[], eps: readonly DbEndpointSpec[] | null): Promise<void> {
    const wanted = new Map<string, { c: ConfigSpec; ip: string }>();
    for (const nb of upserts) {
      for (const c of nb.configs) {
        wanted.set(c.listenKey, { c, ip: c.ip });
        if (c.listenKey6 !== '') wanted.set(c.listenKey6, { c, ip: c.ip6 });
      }
    }
    // What the touched NodeBalancers served before: listeners and configs that may leave.
    const leaving = new Set<string>();
    const before: number[] = [];
    for (const id of [...upserts.map((nb) => nb.id), ...removed]) {
      for (const c of nbs.get(id)?.configs ?? []) {
        before.push(c.id);
        for (const key of [c.listenKey, c.listenKey6]) if (key !== '' && !wanted.has(key)) leaving.add(key);
      }
    }

    // Bind every new address first; if one fails nothing changes.
    const fresh: (Listener | UdpListener)[] = [];
    for (const [key, { c, ip }] of wanted) {
      if (listeners.has(key) || !bind) continue;
      fresh.push(c.protocol === 'udp' ? new UdpListener(ip, c.port, clock, log, limits, opts.udpSocket) : new Listener(ip, c.port, clock, log, limits, opts.shared, ports));
    }
    // Bound in parallel: a snapshot of thousands of NodeBalancers must not bind one by one.
    const binds = await Promise.allSettled(fresh.map((l) => l.listen()));
    const failed = binds.flatMap((r, i) => (r.status === 'rejected' ? [`${fresh[i].key}: ${(r.reason as NodeJS.ErrnoException).code ?? (r.reason as Error).message}`] : []));
    // A process that binds nothing (the workers' primary) serves no database endpoint either.
    const bound = eps && bind ? await endpoints.bind(eps) : { fresh: [], failed: [] };
    failed.push(...bound.failed);
    if (failed.length > 0) {
      for (const l of fresh) l.destroy();
      for (const e of bound.fresh) e.close();
      throw new FulcrumError('invalid_config', `cannot listen on ${failed.join(', ')}`);
    }

    // Runtimes of configs new here are built before the swap, in slices (nothing serves them
    // yet), so the swap below stays short however many NodeBalancers arrive at once.
    const built = new Map<number, ConfigRuntime>();
    for (const nb of upserts) {
      for (const c of nb.configs) {
        if (reusable(runtimes.get(c.id), c)) continue;
        if (!throttles.has(nb.id)) gates(nb);
        built.set(c.id, newRuntime(c, nb.id));
        if (built.size % SLICE === 0) await pause();
      }
    }
    if (closed) {
      for (const l of fresh) l.destroy();
      for (const e of bound.fresh) e.close();
      for (const rt of built.values()) rt.retire();
      throw new FulcrumError('invalid_config', 'engine is closed');
    }

    // Swap (synchronous from here: no connection sees a half-applied snapshot).
    for (const l of fresh) {
      listeners.set(l.key, l);
      if (l instanceof UdpListener) udpListeners++;
    }
    let addressesMoved = eps !== null || removed.length > 0;
    const keptConfigs = new Set<number>();
    for (const nb of upserts) {
      const prev = nbs.get(nb.id);
      if (prev?.ipv4 !== nb.ipv4) addressesMoved = true;
      for (const c of prev?.configs ?? []) configOwner.delete(c.id);
      nbs.set(nb.id, nb);
      gates(nb);
      for (const c of nb.configs) {
        keptConfigs.add(c.id);
        configOwner.set(c.id, nb.id);
        listenOwner.set(c.listenKey, nb.id);
        if (c.listenKey6 !== '') listenOwner.set(c.listenKey6, nb.id);
        let rt = runtimes.get(c.id);
        if (reusable(rt, c)) {
          rt.update(c);
        } else {
          if (rt) retire(rt);
          rt = built.get(c.id) ?? newRuntime(c, nb.id);
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
    for (const id of removed) {
      for (const c of nbs.get(id)?.configs ?? []) configOwner.delete(c.id);
      nbs.delete(id);
      throttles.delete(id);
      udpGates.delete(id);
    }
    for (const id of before) {
      const rt = runtimes.get(id);
      if (rt && !keptConfigs.has(id)) retire(rt);
    }
    for (const key of leaving) {
      const l = listeners.get(key);
      listenOwner.delete(key);
      if (!l) continue;
      listeners.delete(key);
      if (l instanceof UdpListener) udpListeners--;
      l.rt = null;
      void l.drain(drainTimeoutMs);
    }
    if (eps && bind) endpoints.swap(eps, bound.fresh);
    for (const l of fresh) if (l instanceof Listener) l.serve();
    // Descriptors held: with wildcard listeners one per port, and the udp listeners (each binds its address).
    limits.listeners = (ports === null ? listeners.size : ports.size + udpListeners) + endpoints.size;
    version = nextVersion;
    // Keepalived holds every address served here: NodeBalancers' and database endpoints', so
    // hosts.primary moves with the pair (docs/multi-host.md).
    if (eps) endpointSpecs = eps;
    if (addressesMoved) served = [...new Set([...[...nbs.values()].map((nb) => nb.ipv4), ...endpointSpecs.map((e) => e.address)])].sort();
    log.info({ version, listeners: listeners.size, configs: runtimes.size, databaseEndpoints: endpoints.size, changed: upserts.length, removed: removed.length }, 'snapshot applied');
  }

  /** A config keeps its runtime (node state, pools) unless it moved NodeBalancer or to or from udp. */
  function reusable(rt: ConfigRuntime | undefined, c: ConfigSpec): rt is ConfigRuntime {
    return rt !== undefined && rt.spec.nodebalancerId === c.nodebalancerId && (rt.spec.protocol === 'udp') === (c.protocol === 'udp');
  }

  function newRuntime(c: ConfigSpec, nb: number): ConfigRuntime {
    return new ConfigRuntime(c, (c.protocol === 'udp' ? udpGates : throttles).get(nb)!, clock, log.child({ configId: c.id }), emit, opts.remoteHealth, tickets);
  }

  /** A NodeBalancer's throttles; premium: 10x the connections, 8x the UDP sessions in all and per client (docs/dataplane.md "UDP"); a worker's UDP part (`udpPart`). */
  function gates(nb: NodeBalancerSpec): void {
    const [tcp, udp] = nb.type === 'premium' ? [10, 8] : [1, 1];
    gate(throttles, nb.id, nb.clientConnThrottle, limits.perClientPerNodeBalancer, limits.perNodeBalancer * tcp);
    gate(udpGates, nb.id, limits.udpPart(nb.clientUdpSessThrottle), limits.udpPart(limits.udpSessionsPerClient * udp), limits.udpPart(limits.udpSessionsPerNodeBalancer * udp));
  }

  /** Creates or updates a NodeBalancer's throttle (per client rate, concurrent caps). */
  function gate(map: Map<number, ConnThrottle>, id: number, rate: number, perClient: number, total: number): void {
    let t = map.get(id);
    if (t) t.limit = rate;
    else map.set(id, (t = new ConnThrottle(rate, clock, perClient, total)));
    t.concurrent.total = total;
    t.concurrent.perKey = perClient;
  }

  function retire(rt: ConfigRuntime): void {
    rt.retire();
    runtimes.delete(rt.spec.id);
    retired.add(rt);
  }

  const engine: ProxyEngine = {
    apply: (snapshot) => queue(async () => commitNow(await prepareNow(snapshot))),
    prepare: (snapshot) => queue(() => prepareNow(snapshot)),
    commitPrepared: (prepared) => queue(() => commitNow(prepared)),
    config: (id) => runtimes.get(id),
    servesNodeBalancer: (id) => nbs.has(id),
    state: () => ({ version, baseVersion: null, nodebalancers: [...nbs.values()], removed: [], databaseEndpoints: endpointSpecs }),
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
      stopRekeying();
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
