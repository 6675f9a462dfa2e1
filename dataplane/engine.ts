import { systemClock } from '../lib/clock.js';
import { FulcrumError } from '../lib/errors.js';
import { silentLogger } from '../lib/logger.js';
import type { NodeBalancerSpec } from './config/model.js';
import type { DbEndpointSpec } from './config/endpoint-model.js';
import { validateSnapshotSliced, type SnapshotInput } from './config/validate.js';
import { validateDelta, type PreparedSnapshot } from './config/validate-delta.js';
import { ListenerSet, type WantedListener } from './listeners/listener-set.js';
import { WildcardPorts } from './listeners/wildcard-ports.js';
import type { ConfigRuntime } from './runtime/config-runtime.js';
import { RuntimeSet } from './runtime/runtime-set.js';
import { TicketKeys } from './runtime/ticket-keys.js';
import { ConnLimits } from './throttle/conn-limits.js';
import type { CounterDelta, HealthEvent, TelemetrySource } from './telemetry/telemetry-source.js';
import type { MetricsSource } from './telemetry/metrics.js';
import { DbEndpointSet } from './endpoints/endpoint-set.js';
import type { DbEndpoint } from './endpoints/db-endpoint.js';
import type { EngineOptions } from './engine-options.js';
import { ServedState } from './served-state.js';

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
  const limits = new ConnLimits(opts.limits, clock);
  const bind = opts.bind ?? true;
  const tickets = opts.ticketKeys ?? new TicketKeys();
  const healthSubs = new Set<(ev: HealthEvent) => void>();
  const emit = (ev: HealthEvent): void => {
    for (const cb of healthSubs) {
      try {
        cb(ev);
      } catch (err) {
        log.error({ err }, 'health subscriber failed');
      }
    }
  };
  const listeners = new ListenerSet({
    clock, log, limits, bind, shared: opts.shared, udpSocket: opts.udpSocket, udpNative: opts.udpNative,
    ports: opts.wildcard ? new WildcardPorts(log) : null,
    // The endpoints' caps key clients as the NodeBalancers' do, unless told otherwise.
    endpoints: new DbEndpointSet(log, { ...opts.endpoints, limits: { clientIpv6Prefix: limits.clientIpv6Prefix, ...opts.endpoints?.limits } }),
  });
  const served = new ServedState((key) => listeners.endpoints.has(key));
  const runtimes = new RuntimeSet({ clock, log, limits, emit, remoteHealth: opts.remoteHealth, tickets });
  let chain: Promise<void> = Promise.resolve();
  let closed = false;

  const stopRekeying = tickets.onChange(() => runtimes.rekey());

  async function prepareNow(input: SnapshotInput): Promise<PreparedSnapshot> {
    if (closed) throw new FulcrumError('invalid_config', 'engine is closed');
    try {
      if (input.incremental === true) {
        const d = validateDelta(input, served.index);
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
    const version = served.version;
    if (base !== version) throw new FulcrumError('invalid_config', `incremental snapshot ${next} applies on version ${base}, but version ${version} is served`);
  }

  /** A whole prepared snapshot removes every NodeBalancer it does not name. */
  async function commitNow(p: PreparedSnapshot): Promise<void> {
    if (closed) throw new FulcrumError('invalid_config', 'engine is closed');
    if (p.baseVersion !== null) checkBase(p.version, p.baseVersion);
    const keep = p.baseVersion === null ? new Set(p.nodebalancers.map((nb) => nb.id)) : null;
    const removed = keep === null ? p.removed : [...served.ids()].filter((id) => !keep.has(id));
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
   * listens on its NodeBalancer's ipv4 and, when it has one, its ipv6. The steps: bind what is
   * new (the listener set), build the new configs' runtimes (the runtime set), then swap all
   * three (served state, runtimes, listeners) without yielding.
   */
  async function commit(nextVersion: number, upserts: readonly NodeBalancerSpec[], removed: readonly number[], eps: readonly DbEndpointSpec[] | null): Promise<void> {
    const wanted = new Map<string, WantedListener>();
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
      for (const c of served.configsOf(id)) {
        before.push(c.id);
        for (const key of [c.listenKey, c.listenKey6]) if (key !== '' && !wanted.has(key)) leaving.add(key);
      }
    }

    // Bind every new address first; if one fails nothing changes.
    const bound = await listeners.bindNew(wanted, eps);
    const built = await runtimes.build(upserts, SLICE, pause);
    if (closed) {
      listeners.abandon(bound);
      runtimes.discard(built);
      throw new FulcrumError('invalid_config', 'engine is closed');
    }

    // Swap (synchronous from here: no connection sees a half-applied snapshot).
    listeners.install(bound);
    let addressesMoved = eps !== null || removed.length > 0;
    const keptConfigs = new Set<number>();
    for (const nb of upserts) {
      if (served.serve(nb)) addressesMoved = true;
      runtimes.gates(nb);
      for (const c of nb.configs) {
        keptConfigs.add(c.id);
        listeners.attach(c, runtimes.take(c, nb.id, built));
      }
    }
    for (const id of removed) {
      served.remove(id);
      runtimes.dropGates(id);
    }
    runtimes.retireUnless(before, keptConfigs);
    for (const key of leaving) {
      served.releaseListenKey(key);
      listeners.release(key, drainTimeoutMs);
    }
    listeners.complete(bound);
    served.settle(nextVersion, eps, addressesMoved);
    log.info({ version: nextVersion, listeners: listeners.size, configs: runtimes.size, databaseEndpoints: listeners.endpoints.size, changed: upserts.length, removed: removed.length }, 'snapshot applied');
  }

  const engine: ProxyEngine = {
    apply: (snapshot) => queue(async () => commitNow(await prepareNow(snapshot))),
    prepare: (snapshot) => queue(() => prepareNow(snapshot)),
    commitPrepared: (prepared) => queue(() => commitNow(prepared)),
    config: (id) => runtimes.get(id),
    servesNodeBalancer: (id) => served.has(id),
    state: () => served.snapshot(),
    version: () => served.version,
    addresses: () => served.addresses(),
    configs: () => {
      listeners.collectUdp();
      return runtimes.values();
    },
    refusals: () => limits.refused,
    openConnections: () => limits.open,
    databaseEndpoints: () => listeners.endpoints.all(),
    onHealth(cb) {
      healthSubs.add(cb);
      return () => healthSubs.delete(cb);
    },
    healthSnapshot() {
      const out: HealthEvent[] = [];
      for (const rt of runtimes.values()) out.push(...rt.statuses());
      return out;
    },
    drainCounters: () => {
      listeners.collectUdp();
      return runtimes.drainCounters();
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
      runtimes.markDraining();
      await listeners.drain(deadlineMs);
      runtimes.retireAll();
    },
    async close() {
      if (closed) return;
      closed = true;
      stopRekeying();
      await chain;
      runtimes.retireAll();
      listeners.close();
      runtimes.clear();
    },
  };
  return engine;
}
