import { readdir, rm, stat } from 'node:fs/promises';
import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { DesiredDatabase__Output } from '../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { ObservedDatabase } from '../proto/gen/fulcrum/v1/ObservedDatabase.js';
import type { AgentEvent } from '../proto/gen/fulcrum/v1/AgentEvent.js';
import type { NodeObservation } from '../proto/gen/fulcrum/v1/NodeObservation.js';
import { resolveEngine, type Catalogue } from './catalogue.js';
import type { AgentMetrics } from './agent-metrics.js';
import { accountsKey, databaseDir, loadDbState, newDbState, saveDbState, type DbState } from './database-state.js';
import { allocateAddresses } from './address-pool.js';
import { createFrontProxy, type FrontProxy } from './endpoints/front-proxy.js';
import { failover, switchover, type ClusterNode } from './failover/promotion.js';
import { seedFromDump } from './failover/seed-replica.js';
import { ensureReplicationUser, syncAdminAccounts } from './mysql/accounts.js';
import { globalStatus, q, secureRoot, withAdmin, type AdminTarget } from './mysql/admin.js';
import { renderNodeConfig } from './mysql/config-render.js';
import { configureReplica, gtidCurrentPos, promote, replicaStatus, waitForGtid } from './mysql/replication.js';
import { ensureClusterTls, ensureKeyFile, type ClusterTls } from './mysql/tls.js';
import { plan, observedStatus, type Action, type DbObs, type NodeObs } from './reconcile.js';
import {
  LABEL_AGENT, LABEL_DATABASE, LABEL_MANAGED, LABEL_NODE, sameSpec,
  type ContainerRuntime, type NodeSpec,
} from './runtime/container-runtime.js';

export const NODE_PORT = 3306;

/** The primary no longer has the binlog a replica asks for (error 1236). */
export class BinlogPurgedError extends Error {}

/** Disk used by a data directory, MiB (for used_disk_size_gb). */
async function dirSizeMb(dir: string): Promise<number> {
  let total = 0;
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      else total += (await stat(p).catch(() => ({ size: 0 }))).size;
    }
  };
  await walk(dir);
  return Math.ceil(total / (1024 * 1024));
}

export interface ControllerDeps {
  id: number;
  agentId: string;
  /** Short stable token of the agent id, part of node names. */
  agentKey: string;
  stateDir: string;
  runtime: ContainerRuntime;
  runtimeKind: 'process' | 'docker';
  catalogue: Catalogue;
  logger: Logger;
  clock: Clock;
  nodeAddressPool: string;
  takenAddresses: () => Set<string>;
  onChange: () => void;
  metrics?: AgentMetrics;
}

/** Hooks the day-two services (backups, maintenance) plug into; see agent.ts. */
export interface ControllerExtras {
  windowOpen: (c: DatabaseController) => boolean;
  extraReport: (c: DatabaseController) => Partial<ObservedDatabase>;
}

interface NodeDetail extends NodeObs {
  address: string;
  gtid: string;
  lastError: string;
}

/**
 * Runs one database: observes its nodes, asks `plan` what to do, and executes one action at a
 * time (never two at once for the same database). Day-two work (operations) goes through
 * `runExclusive`, so it never overlaps a heal or a rolling restart either.
 */
export class DatabaseController {
  desired?: DesiredDatabase__Output;
  state?: DbState;
  busy?: string;
  readonly log: Logger;
  private tls?: ClusterTls;
  private keyfile?: string;
  private details: NodeDetail[] = [];
  private lastObs?: DbObs;
  private primaryDown = 0;
  private proxies = new Map<'primary' | 'secondary', FrontProxy>();
  private proxyKey = '';
  private retryAt = 0;
  private ticking = false;
  private lastStatus = '';
  private rejoinFailures = new Map<number, number>();
  private events: AgentEvent[] = [];
  private diskMb = 0;
  private diskAt = 0;
  /** Set by a PatchOp; cleared when a rolling patch completes. */
  patchRequested?: { resolve: (err?: string) => void };
  /** Overrides the desired password while a credentials reset is being applied. */
  pendingPassword?: string;
  extras?: ControllerExtras;
  deleted = false;

  constructor(readonly deps: ControllerDeps) {
    this.log = deps.logger.child({ component: 'database', database: deps.id });
    this.state = loadDbState(deps.stateDir, deps.id);
  }

  get id(): number {
    return this.deps.id;
  }
  get dir(): string {
    return databaseDir(this.deps.stateDir, this.deps.id);
  }
  get clusterSize(): number {
    return this.state?.addresses.length || this.desired?.clusterSize || 1;
  }
  nodeName(k: number): string {
    return `f${this.deps.agentKey}-db${this.id}-n${k}`;
  }
  nodeIndexes(): number[] {
    return Array.from({ length: this.clusterSize }, (_, i) => i + 1);
  }
  async adminTarget(k: number): Promise<AdminTarget> {
    const c = await this.deps.runtime.connection(this.nodeName(k));
    return { socketPath: c.socketPath, password: this.state!.adminPassword };
  }
  clusterNode = async (k: number): Promise<ClusterNode> => ({
    index: k,
    address: this.state!.addresses[k - 1]!,
    port: NODE_PORT,
    admin: await this.adminTarget(k),
  });
  get semiSync(): boolean {
    const d = this.desired ?? this.state?.desired;
    return d?.replicationType === 'semi_synch' && this.clusterSize > 1;
  }
  primaryAddress(): string {
    return this.state?.addresses[(this.state?.primary ?? 1) - 1] ?? '';
  }

  emit(action: string, message: string, status = 'finished'): void {
    this.events.push({ id: randomUUID(), action, message, atMs: this.deps.clock.now(), status });
    if (this.events.length > 20) this.events.splice(0, this.events.length - 20);
    this.log.info({ action }, message);
    this.deps.onChange();
  }

  /** The node spec the desired state calls for (with the binary/image in state.running). */
  nodeSpec(k: number): NodeSpec {
    const d = this.desired ?? this.state!.desired!;
    const s = this.state!;
    const files: Record<string, string> = {
      'ca.pem': this.tls!.caPem,
      'server.pem': this.tls!.serverCertPem,
      'server-key.pem': this.tls!.serverKeyPem,
    };
    if (d.encrypted && this.keyfile) files['keyfile'] = this.keyfile;
    return {
      name: this.nodeName(k),
      labels: {
        [LABEL_MANAGED]: 'true',
        [LABEL_AGENT]: this.deps.agentId,
        [LABEL_DATABASE]: String(this.id),
        [LABEL_NODE]: String(k),
      },
      engine: { id: d.engineId, version: s.running.version, binary: s.running.binary, image: s.running.image },
      dataDir: join(this.dir, `n${k}`, 'data'),
      config: renderNodeConfig({
        databaseId: this.id,
        index: k,
        memoryMb: d.type?.memoryMb || 1024,
        semiSync: this.semiSync,
        ssl: d.sslConnection,
        encrypted: d.encrypted,
        proxyNetworks: [d.hostPrimary, d.hostSecondary].filter(Boolean),
      }),
      files,
      host: s.addresses[k - 1]!,
      port: NODE_PORT,
      memoryMb: d.type?.memoryMb || 1024,
      cpus: d.type?.vcpus || 1,
    };
  }

  private resolveTarget(): DbState['running'] {
    const d = this.desired!;
    const e = resolveEngine(this.deps.catalogue, { engineId: d.engineId, binary: d.binary || undefined, image: d.image || undefined }, this.deps.runtimeKind);
    return { binary: e.binary, image: e.image, version: e.version };
  }

  private async ensureTls(): Promise<void> {
    const d = this.desired ?? this.state!.desired!;
    this.tls = await ensureClusterTls(join(this.dir, 'tls'), this.id, [...this.state!.addresses, d.hostPrimary, d.hostSecondary]);
    if (d.encrypted) this.keyfile = await ensureKeyFile(join(this.dir, 'tls'));
  }

  async save(): Promise<void> {
    if (this.state && !this.deleted) await saveDbState(this.deps.stateDir, this.state);
  }

  // ------------------------------------------------------------------------------------------
  // Observation

  async observe(): Promise<DbObs> {
    const s = this.state;
    const d = this.desired;
    const base: DbObs = {
      known: !!s,
      provisioned: !!s?.provisioned,
      clusterSize: s?.addresses.length ?? 0,
      primary: s?.primary ?? 1,
      nodes: [],
      rebuild: s?.rebuild ?? [],
      accountsCurrent: true,
      proxiesCurrent: true,
      suspended: !!s?.suspended,
      patchPending: false,
      patchRequested: !!this.patchRequested,
      windowOpen: false,
      primaryDownCount: this.primaryDown,
    };
    if (!s || !s.provisioned || !d) {
      this.lastObs = base;
      return base;
    }
    if (!this.tls) await this.ensureTls();
    const details: NodeDetail[] = [];
    await Promise.all(
      this.nodeIndexes().map(async (k) => {
        const st = await this.deps.runtime.inspect(this.nodeName(k));
        const n: NodeDetail = {
          index: k, state: st.state, specCurrent: false, reachable: false, readOnly: true, replicating: false,
          address: s.addresses[k - 1]!, gtid: '', lastError: '',
        };
        if (st.state === 'missing') return details.push(n);
        n.specCurrent = !!st.spec && sameSpec(st.spec, this.nodeSpec(k));
        if (st.state === 'running') {
          try {
            await withAdmin(await this.adminTarget(k), async (c) => {
              const rows = await q(c, 'SELECT @@read_only AS ro, @@gtid_current_pos AS g');
              n.readOnly = Number(rows[0]?.ro) === 1;
              n.gtid = String(rows[0]?.g ?? '');
              const rs = await replicaStatus(c);
              n.replicating = !!rs && rs.ioRunning && rs.sqlRunning && rs.masterHost === this.primaryAddress();
              n.lastError = rs?.lastError ?? '';
            });
            n.reachable = true;
          } catch (err) {
            n.lastError = (err as Error).message;
          }
        }
        details.push(n);
      }),
    );
    details.sort((a, b) => a.index - b.index);
    this.details = details;
    if (Date.now() - this.diskAt > 30_000) {
      this.diskAt = Date.now();
      void dirSizeMb(join(this.dir, `n${s.primary}`, 'data')).then((mb) => (this.diskMb = mb));
    }
    const primary = details.find((n) => n.index === s.primary);
    this.primaryDown = primary?.state === 'running' && primary.reachable ? 0 : this.primaryDown + 1;
    const want = this.pendingPassword ?? d.rootPassword;
    let patchPending = false;
    try {
      const t = this.resolveTarget();
      patchPending = t.binary !== s.running.binary || t.image !== s.running.image;
    } catch {
      // An engine gone from the catalogue cannot be patched to.
    }
    const obs: DbObs = {
      ...base,
      nodes: details,
      primaryDownCount: this.primaryDown,
      accountsCurrent: s.accountsKey === accountsKey(d.allowList, want),
      proxiesCurrent: this.proxyKey === this.wantProxyKey(),
      patchPending,
      windowOpen: this.extras?.windowOpen(this) ?? false,
    };
    this.lastObs = obs;
    return obs;
  }

  /** Replicas seen replicating in the last observation, most useful first. */
  healthyReplicas(): number[] {
    return this.details.filter((n) => n.index !== this.state?.primary && n.state === 'running' && n.reachable && n.replicating).map((n) => n.index);
  }

  /** Closes client connections and refuses new ones until the next syncProxies (restore). */
  pauseTraffic(): void {
    for (const p of this.proxies.values()) p.setBackends([]);
    this.proxyKey = '';
  }

  private secondaryBackends(): string[] {
    const reps = this.details.filter((n) => n.index !== this.state!.primary && n.state === 'running' && n.replicating);
    return reps.length > 0 ? reps.map((n) => n.address) : [this.primaryAddress()];
  }

  private wantProxyKey(): string {
    const d = this.desired!;
    return JSON.stringify([d.hostPrimary, d.hostSecondary, d.port, [...d.allowList].sort(), this.primaryAddress(), this.secondaryBackends()]);
  }

  // ------------------------------------------------------------------------------------------
  // Loop

  /**
   * One observe-plan-act round; does nothing while an action runs or another round is under
   * way, and drops its plan if an operation took the lock meanwhile (a plan made before a
   * restore or a switchover must not run after it).
   */
  async tick(): Promise<void> {
    if (this.busy || this.ticking || this.deleted) return;
    if (Date.now() < this.retryAt && !this.state?.provisioned) return;
    this.ticking = true;
    try {
      let actions: Action[];
      try {
        const obs = await this.observe();
        const d = this.desired;
        actions = plan(d ? { clusterSize: d.clusterSize, state: d.state === 'suspended' ? 'suspended' : 'running' } : undefined, obs);
      } catch (err) {
        this.log.warn({ err }, 'observation failed');
        return;
      }
      const next = actions[0];
      if (!next || this.busy || this.deleted) return;
      await this.runExclusive(next.kind, () => this.execute(next));
    } finally {
      this.ticking = false;
    }
  }

  /** Runs `fn` as the database's one action in flight; reports busy meanwhile. */
  async runExclusive<T>(label: string, fn: () => Promise<T>): Promise<T> {
    while (this.busy) await new Promise((r) => setTimeout(r, 50));
    this.busy = label;
    this.deps.onChange();
    try {
      return await fn();
    } finally {
      this.busy = undefined;
      this.deps.onChange();
    }
  }

  private async execute(a: Action): Promise<void> {
    const end = this.deps.metrics?.actionSeconds.startTimer({ action: a.kind });
    try {
      await this.executeInner(a);
      this.deps.metrics?.actions.inc({ action: a.kind, result: 'ok' });
      if (a.kind === 'failover') this.deps.metrics?.failovers.inc();
    } catch {
      this.deps.metrics?.actions.inc({ action: a.kind, result: 'error' });
    } finally {
      end?.();
    }
  }

  /** Runs an action; failures are logged and turned into state here, rethrown for metrics. */
  private async executeInner(a: Action): Promise<void> {
    try {
      switch (a.kind) {
        case 'provision': return await this.provision();
        case 'delete': return await this.remove();
        case 'suspend': return await this.suspend();
        case 'resume': return await this.resume();
        case 'restart-primary': return await this.restartPrimary();
        case 'promote-primary': return await withAdmin(await this.adminTarget(this.state!.primary), (c) => promote(c, this.semiSync));
        case 'failover': return await this.doFailover();
        case 'rejoin': return await this.rejoin(a.index, a.rebuild);
        case 'rolling': return await this.rolling(a.reason);
        case 'sync-accounts': return await this.syncAccounts();
        case 'sync-proxies': return await this.syncProxies();
      }
    } catch (err) {
      const msg = (err as Error).message;
      this.log.error({ err, action: a.kind }, 'action failed');
      if (a.kind === 'provision' && this.state) {
        this.state.error = `provisioning failed: ${msg}`;
        this.retryAt = Date.now() + 15_000;
        await this.save();
        this.emit('database_create', this.state.error, 'failed');
      }
      if (a.kind === 'rejoin') this.rejoinFailures.set(a.index, (this.rejoinFailures.get(a.index) ?? 0) + 1);
      if (a.kind === 'rolling' && a.reason === 'patch' && this.patchRequested) {
        this.patchRequested.resolve(msg);
        this.patchRequested = undefined;
      }
      throw err;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Actions

  private async provision(): Promise<void> {
    const d = this.desired!;
    if (!d.hostPrimary || !d.hostSecondary) throw new Error('the control plane assigned no endpoint addresses');
    const started = Date.now();
    if (!this.state) this.state = newDbState(this.id);
    const s = this.state;
    if (s.addresses.length !== d.clusterSize) {
      s.addresses = await allocateAddresses(this.deps.nodeAddressPool, d.clusterSize, this.deps.takenAddresses());
    }
    if (!s.running.binary && !s.running.image) s.running = this.resolveTarget();
    s.desired = d;
    await this.save();
    await this.ensureTls();
    const ks = this.nodeIndexes();
    const step = (name: string) => this.log.debug({ step: name, ms: Date.now() - started }, 'provision step');
    step('tls');
    await Promise.all(ks.map((k) => this.deps.runtime.ensure(this.nodeSpec(k))));
    step('nodes started');
    await Promise.all(
      ks.map(async (k) => {
        const t = await this.adminTarget(k);
        await secureRoot(t.socketPath, s.adminPassword);
        await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
      }),
    );
    step('secured');
    const p = s.primary;
    await withAdmin(await this.adminTarget(p), (c) => promote(c, this.semiSync));
    const replicas = ks.filter((k) => k !== p);
    await Promise.all(replicas.map(async (k) => withAdmin(await this.adminTarget(k), (c) =>
      configureReplica(c, { primaryHost: s.addresses[p - 1]!, primaryPort: NODE_PORT, password: s.replPassword }))));
    if (replicas.length > 0 && d.replicationType === 'semi_synch') {
      // Writes on a semi-sync primary wait for an ack; make sure replicas are attached first.
      await this.waitUntil(async () =>
        withAdmin(await this.adminTarget(p), async (c) => Number(await globalStatus(c, 'Rpl_semi_sync_master_clients')) >= replicas.length), 15_000);
    }
    step('replicas attached');
    await this.syncAccounts();
    step('accounts');
    const pos = await withAdmin(await this.adminTarget(p), async (c) => gtidCurrentPos(c));
    await Promise.all(replicas.map(async (k) => withAdmin(await this.adminTarget(k), async (c) => {
      const t = Date.now();
      const ok = await waitForGtid(c, pos, 15);
      this.log.debug({ k, ok, pos, ms: Date.now() - t, g: await gtidCurrentPos(c) }, 'gtid wait');
    })));
    step('replicas caught up');
    await this.observe();
    await this.syncProxies();
    s.provisioned = true;
    s.error = undefined;
    await this.save();
    this.log.info({ ms: Date.now() - started, nodes: ks.length }, 'provisioned');
  }

  async waitUntil(cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
    const end = Date.now() + timeoutMs;
    for (;;) {
      try {
        if (await cond()) return;
      } catch {
        // Retry until the deadline.
      }
      if (Date.now() > end) throw new Error('timed out waiting for the cluster');
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  async syncAccounts(): Promise<void> {
    const d = this.desired!;
    const password = this.pendingPassword ?? d.rootPassword;
    await withAdmin(await this.adminTarget(this.state!.primary), (c) => syncAdminAccounts(c, d.allowList, password));
    this.state!.accountsKey = accountsKey(d.allowList, password);
    await this.save();
  }

  async syncProxies(): Promise<void> {
    const d = this.desired!;
    const want = { primary: d.hostPrimary, secondary: d.hostSecondary };
    for (const role of ['primary', 'secondary'] as const) {
      let p = this.proxies.get(role);
      if (p && (p.host !== want[role] || p.port !== d.port)) {
        await p.close();
        p = undefined;
      }
      if (!p) {
        p = createFrontProxy({ host: want[role], port: d.port || 3306, logger: this.log, name: `db${this.id}-${role}` });
        await p.listen();
        this.proxies.set(role, p);
      }
      p.setAllowList(d.allowList);
      const addrs = role === 'primary' ? [this.primaryAddress()] : this.secondaryBackends();
      p.setBackends(addrs.map((host) => ({ host, port: NODE_PORT })));
    }
    this.proxyKey = this.wantProxyKey();
  }

  async closeProxies(): Promise<void> {
    for (const p of this.proxies.values()) await p.close();
    this.proxies.clear();
    this.proxyKey = '';
  }

  private async remove(): Promise<void> {
    this.deleted = true;
    await this.closeProxies();
    const names = new Set(this.nodeIndexes().map((k) => this.nodeName(k)));
    for (const n of await this.deps.runtime.list({ [LABEL_AGENT]: this.deps.agentId, [LABEL_DATABASE]: String(this.id) })) names.add(n.name);
    await Promise.all([...names].map((n) => this.deps.runtime.remove(n, { withData: true })));
    await rm(this.dir, { recursive: true, force: true });
    await rm(join(this.deps.stateDir, 'backups', String(this.id)), { recursive: true, force: true });
    this.state = undefined;
    this.log.info('deleted');
  }

  private async suspend(): Promise<void> {
    await this.closeProxies();
    await Promise.all(this.nodeIndexes().map((k) => this.deps.runtime.stop(this.nodeName(k))));
    this.state!.suspended = true;
    await this.save();
  }

  /** Starts the nodes again and restores their roles in the same action (no degraded flap). */
  private async resume(): Promise<void> {
    const s = this.state!;
    await this.ensureTls();
    await Promise.all(this.nodeIndexes().map((k) => this.deps.runtime.ensure(this.nodeSpec(k))));
    await withAdmin(await this.adminTarget(s.primary), (c) => promote(c, this.semiSync));
    for (const k of this.nodeIndexes().filter((i) => i !== s.primary)) await this.attach(k);
    s.suspended = false;
    await this.save();
    await this.observe();
    await this.syncProxies();
  }

  private async restartPrimary(): Promise<void> {
    const p = this.state!.primary;
    await this.ensureTls();
    await this.deps.runtime.ensure(this.nodeSpec(p));
    await withAdmin(await this.adminTarget(p), (c) => promote(c, this.semiSync));
  }

  private async doFailover(): Promise<void> {
    const s = this.state!;
    const old = s.primary;
    // Fence first: a primary that is merely hung must not wake up writable next to the new one.
    await this.deps.runtime.kill(this.nodeName(old)).catch(() => undefined);
    const alive = this.details.filter((n) => n.index !== old && n.state === 'running' && n.reachable);
    const winner = await failover(await Promise.all(alive.map((n) => this.clusterNode(n.index))), s.replPassword, this.semiSync, this.log);
    s.primary = winner;
    if (!s.rebuild.includes(old)) s.rebuild.push(old);
    await this.save();
    this.primaryDown = 0;
    await this.observe();
    await this.syncProxies();
    this.emit('database_failover', `primary node ${old} (${s.addresses[old - 1]}) failed; node ${winner} (${s.addresses[winner - 1]}) promoted`);
  }

  private async rejoin(k: number, rebuildIn: boolean): Promise<void> {
    const s = this.state!;
    const rebuild = rebuildIn || (this.rejoinFailures.get(k) ?? 0) >= 3;
    await this.ensureTls();
    const name = this.nodeName(k);
    if (rebuild) {
      // Replaying the primary's binlog from the first GTID rebuilds the node exactly: the binlog
      // holds the whole history (nothing is purged for expire_logs_days).
      await this.deps.runtime.remove(name, { withData: true });
    }
    await this.deps.runtime.ensure(this.nodeSpec(k));
    const t = await this.adminTarget(k);
    if (rebuild) {
      await secureRoot(t.socketPath, s.adminPassword);
      await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
    }
    let seeded = false;
    try {
      await this.attach(k);
    } catch (err) {
      if (!(rebuild && err instanceof BinlogPurgedError)) throw err;
      this.log.info({ node: k }, 'primary binlog purged; seeding the node from a dump');
      const d = this.desired ?? s.desired!;
      await seedFromDump({
        runtime: this.deps.runtime,
        source: { name: this.nodeName(s.primary), admin: await this.adminTarget(s.primary) },
        target: { name, admin: t },
        adminPassword: s.adminPassword,
        allowList: d.allowList,
        linrootPassword: this.pendingPassword ?? d.rootPassword,
      });
      await this.attach(k);
      seeded = true;
    }
    s.rebuild = s.rebuild.filter((i) => i !== k);
    this.rejoinFailures.delete(k);
    await this.save();
    await this.observe();
    await this.syncProxies();
    if (rebuild) this.emit('database_update', `node ${k} rebuilt${seeded ? ' from a dump of the primary' : ''} and rejoined as a replica`);
  }

  /**
   * Points node k at the current primary and waits until both replication threads run. Fails
   * at once (BinlogPurgedError) when the primary no longer has the binlog the node needs.
   */
  private async attach(k: number): Promise<void> {
    const s = this.state!;
    const t = await this.adminTarget(k);
    await withAdmin(t, (c) => configureReplica(c, { primaryHost: this.primaryAddress(), primaryPort: NODE_PORT, password: s.replPassword }));
    const end = Date.now() + 15_000;
    for (;;) {
      const rs = await withAdmin(t, (c) => replicaStatus(c)).catch(() => undefined);
      if (rs?.ioRunning && rs.sqlRunning) return;
      if (rs && /\b1236\b/.test(rs.lastError)) throw new BinlogPurgedError(rs.lastError);
      if (Date.now() > end) throw new Error(`node ${k} does not replicate: ${rs?.lastError || 'replication threads not running'}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }

  /**
   * Restarts every node with its current spec (resize) or the new binary/image (patch):
   * replicas one at a time, then a switchover, then the old primary. A 1-node database simply
   * restarts (downtime).
   */
  private async rolling(reason: 'resize' | 'patch'): Promise<void> {
    const s = this.state!;
    if (reason === 'patch') {
      s.running = this.resolveTarget();
      await this.save();
    }
    await this.ensureTls();
    const restart = async (k: number) => {
      await this.deps.runtime.stop(this.nodeName(k));
      await this.deps.runtime.ensure(this.nodeSpec(k));
    };
    const p = s.primary;
    if (this.clusterSize === 1) {
      await restart(p);
      await withAdmin(await this.adminTarget(p), (c) => promote(c, this.semiSync));
    } else {
      const replicas = this.nodeIndexes().filter((k) => k !== p);
      for (const k of replicas) {
        await restart(k);
        const t = await this.adminTarget(k);
        await this.attach(k);
        const pos = await withAdmin(await this.adminTarget(p), (c) => gtidCurrentPos(c));
        await withAdmin(t, (c) => waitForGtid(c, pos, 30));
      }
      const target = replicas[0]!;
      await switchover(await this.clusterNode(p), await this.clusterNode(target), await Promise.all(replicas.slice(1).map(this.clusterNode)), s.replPassword, this.semiSync);
      s.primary = target;
      await this.save();
      await this.observe();
      await this.syncProxies();
      await restart(p);
      await this.attach(p);
    }
    await this.observe();
    await this.syncProxies();
    if (reason === 'patch') {
      this.emit('database_update', `patched: nodes restarted with ${s.running.binary ?? s.running.image}`);
      this.patchRequested?.resolve();
      this.patchRequested = undefined;
    }
  }

  // ------------------------------------------------------------------------------------------
  // Report

  report(): ObservedDatabase {
    const s = this.state;
    const d = this.desired ?? s?.desired;
    const primaryOk = this.details.some((n) => n.index === s?.primary && n.state === 'running' && n.reachable && !n.readOnly);
    const replicas = this.details.filter((n) => n.index !== s?.primary);
    // Health is about the servers: a front proxy or account sync still to do (right after an
    // agent restart, say) is not a degraded database.
    const healthy = primaryOk && this.details.length === this.clusterSize && !s?.rebuild.length
      && replicas.every((n) => n.state === 'running' && n.reachable && n.replicating);
    const converged = healthy && !!this.lastObs && plan({ clusterSize: d?.clusterSize ?? 1, state: 'running' }, this.lastObs).length === 0;
    const canFailover = this.clusterSize > 1 && replicas.some((n) => n.state === 'running' && n.reachable);
    // Making a primary that came back read-only writable takes a moment; it is no state change.
    const status = this.busy === 'promote-primary' && this.lastStatus ? this.lastStatus : observedStatus({
      busy: this.busy,
      provisioned: !!s?.provisioned,
      error: s?.error,
      suspended: !!s?.suspended,
      desiredSuspended: d?.state === 'suspended',
      healthy,
      primaryOk,
      canFailover,
    });
    this.lastStatus = status;
    const members: Record<string, string> = {};
    if (s?.provisioned) {
      for (const n of this.details) if (n.state !== 'missing') members[n.address] = n.index === s.primary ? 'primary' : 'failover';
    }
    // Endpoints are the control plane's assignment; they are reported once the database exists.
    const listening = !!s?.provisioned;
    const nodes: NodeObservation[] = this.details.map((n) => ({
      name: this.nodeName(n.index),
      address: n.address,
      port: NODE_PORT,
      role: n.state !== 'running' || !n.reachable ? 'down' : n.index === s?.primary ? 'primary' : 'replica',
      state: n.state,
      replicationOk: n.index === s?.primary ? true : n.replicating,
      gtidCurrentPos: n.gtid,
      lastError: n.lastError,
    }));
    return {
      id: this.id,
      status,
      members,
      hostPrimary: listening ? d?.hostPrimary ?? '' : '',
      hostSecondary: listening ? d?.hostSecondary ?? '' : '',
      port: listening ? d?.port ?? NODE_PORT : 0,
      caCertPem: this.tls?.caPem ?? '',
      error: s?.error ?? (status === 'degraded' ? this.details.find((n) => n.lastError)?.lastError ?? '' : ''),
      engineVersion: s?.running.version ?? '',
      currentPrimary: s?.provisioned ? this.primaryAddress() : '',
      events: this.events,
      nodes,
      patchPending: !!this.lastObs?.patchPending,
      usedDiskMb: this.diskMb,
      convergedGeneration: converged && !this.busy ? d?.generation ?? 0 : 0,
      ...(this.extras?.extraReport(this) ?? {}),
    };
  }
}
