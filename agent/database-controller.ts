import { readdir, stat } from 'node:fs/promises';
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
import { accountsKey, databaseDir, loadDbState, NODE_PORT, saveDbState, type DbState } from './database-state.js';
import { doFailover, provision, rejoin, remove, restartPrimary, resume, rolling, suspend } from './cluster-actions.js';
import { createFrontProxy, type FrontProxy } from './endpoints/front-proxy.js';
import type { ClusterNode } from './failover/promotion.js';
import { syncAdminAccounts } from './mysql/accounts.js';
import { q, withAdmin, type AdminTarget } from './mysql/admin.js';
import { renderNodeConfig } from './mysql/config-render.js';
import { promote, replicaStatus } from './mysql/replication.js';
import { ensureClusterTls, ensureKeyFile, type ClusterTls } from './mysql/tls.js';
import { plan, observedStatus, type Action, type DbObs, type NodeObs } from './reconcile.js';
import {
  LABEL_AGENT, LABEL_DATABASE, LABEL_MANAGED, LABEL_NODE, sameSpec,
  type ContainerRuntime, type NodeSpec,
} from './runtime/container-runtime.js';

export { NODE_PORT };


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
  tls?: ClusterTls;
  keyfile?: string;
  details: NodeDetail[] = [];
  private lastObs?: DbObs;
  primaryDown = 0;
  private proxies = new Map<'primary' | 'secondary', FrontProxy>();
  private proxyKey = '';
  private retryAt = 0;
  private ticking = false;
  private lastStatus = '';
  rejoinFailures = new Map<number, number>();
  private events: AgentEvent[] = [];
  private diskMb = 0;
  private diskAt = 0;
  private lowDisk = false;
  /** The desired generation the last observation was checked against. */
  private obsGeneration = 0;
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

  resolveTarget(): DbState['running'] {
    const d = this.desired!;
    const e = resolveEngine(this.deps.catalogue, { engineId: d.engineId, binary: d.binary || undefined, image: d.image || undefined }, this.deps.runtimeKind);
    return { binary: e.binary, image: e.image, version: e.version };
  }

  async ensureTls(): Promise<void> {
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
      void dirSizeMb(join(this.dir, `n${s.primary}`, 'data')).then((mb) => {
        this.diskMb = mb;
        // The plan's disk is a quota the process runtime cannot enforce; say when it nears it.
        const quota = d.type?.diskMb ?? 0;
        const low = quota > 0 && mb > quota * 0.9;
        if (low && !this.lowDisk) this.emit('database_low_disk_space', `${mb} MiB of ${quota} MiB used`, 'notification');
        this.lowDisk = low;
      }).catch((err) => this.log.warn({ err }, 'disk usage not measured'));
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
    this.obsGeneration = d.generation;
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
    if (!this.desired && this.state && this.busy && this.busy !== 'delete' && !this.deleted) {
      // A deleted database does not wait for a long action (a restore, a rolling restart) to end.
      this.log.info({ busy: this.busy }, 'deleting while an action runs');
      await remove(this).catch((err) => this.log.error({ err }, 'delete failed'));
      return;
    }
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
      // A delete that overtook this action (see tick) sweeps whatever the action re-created.
      if (this.deleted && label !== 'delete') await remove(this).catch((err) => this.log.error({ err }, 'delete sweep failed'));
      this.busy = undefined;
      this.deps.onChange();
    }
  }

  private async execute(a: Action): Promise<void> {
    const end = this.deps.metrics?.actionSeconds.startTimer({ action: a.kind });
    const started = Date.now();
    try {
      await this.executeInner(a);
      this.deps.metrics?.actions.inc({ action: a.kind, result: 'ok' });
      this.log.info({ action: a, ms: Date.now() - started }, 'action done');
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
        case 'provision': return await provision(this);
        case 'delete': return await remove(this);
        case 'suspend': return await suspend(this);
        case 'resume': return await resume(this);
        case 'restart-primary': return await restartPrimary(this);
        case 'promote-primary': return await withAdmin(await this.adminTarget(this.state!.primary), (c) => promote(c, this.semiSync));
        case 'failover': return await doFailover(this);
        case 'rejoin': return await rejoin(this, a.index, a.rebuild);
        case 'rolling': return await rolling(this, a.reason);
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
    // Converged: nothing left to do for the desired state (suspended: every node stopped).
    const wantSuspended = d?.state === 'suspended';
    const nothingToDo = !!this.lastObs && plan({ clusterSize: d?.clusterSize ?? 1, state: wantSuspended ? 'suspended' : 'running' }, this.lastObs).length === 0;
    const converged = nothingToDo && (wantSuspended ? !!s?.suspended : healthy);
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
      // Only an observation made against this very generation can say it has converged.
      convergedGeneration: converged && !this.busy && this.obsGeneration === d?.generation ? this.obsGeneration : 0,
      ...(this.extras?.extraReport(this) ?? {}),
    };
  }
}
