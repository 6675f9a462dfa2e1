import { join } from 'node:path';
import { FulcrumError } from '../../lib/errors.js';
import { Mutex } from '../../lib/mutex.js';
import type { ObservedDatabase } from '../../proto/gen/fulcrum/v1/ObservedDatabase.js';
import { Cluster, type ControllerDeps } from './cluster.js';
import type { MemberSeed } from './context.js';
import { DiskUsage } from './disk-usage.js';
import { applyProxyNetworks, proxyNetworks } from './endpoints.js';
import { failover, fencePrimary, promotePrimary, restartPrimary } from './failover.js';
import { Observer } from './observe.js';
import { namedPrimaryAhead, plan, type Action, type DbObs } from './plan.js';
import { provision } from './provision.js';
import { rejoin } from './rejoin.js';
import { remove } from './remove.js';
import { reportDatabase } from './report.js';
import { restartMember, rolling, untilReplicating } from './rolling.js';
import { scale } from './scale.js';
import { acknowledge, holdAgain } from './seed-ack.js';
import { newDbState } from './state.js';
import { resume, suspend } from './suspend.js';
import { DynamicVariables } from './variables.js';

export type { ControllerDeps };

/** Hooks the day-two services (backups, maintenance) plug into; see agent/day-two.ts. */
export interface ControllerExtras {
  windowOpen: (c: DatabaseController) => boolean;
  extraReport: (c: DatabaseController) => Partial<ObservedDatabase>;
  /** Builds a fork's data (agent/binlog/replay.ts); seedMember a spread member's from the store's physical base (binlog/member-seed.ts). */
  seed?: (c: DatabaseController) => Promise<void>;
  seedMember?: (c: DatabaseController, k: number) => Promise<MemberSeed>;
  /**
   * Cancels the database's background work (archive rounds, bases, backups) and resolves once
   * none runs; a delete calls it before the servers and folders go (docs/agent.md, "Delete").
   */
  stopWork?: (c: DatabaseController) => Promise<void>;
  /**
   * Called as an action or operation takes the database's lock, before it runs: work beside the
   * database that must not overlap it (an archive round's copy on the primary) is stopped.
   */
  beforeAction?: (c: DatabaseController, label: string) => Promise<void>;
  /**
   * Removes every backup, base and binlog segment of the database (the store's objects and its
   * local folder; a delete leaves that folder to it), or records them for a later purge while a
   * fork reads them (a read lease). Idempotent.
   */
  removeStored?: (c: DatabaseController) => Promise<void>;
}

/** A provisioning that failed is tried again after this long (of the injected clock). */
const PROVISION_RETRY_MS = 15_000;
/** A node that failed to rejoin this many times in a row is rebuilt from scratch. */
const REBUILD_AFTER_FAILURES = 3;

/**
 * Runs one database (docs/agent.md §5): observes its nodes, asks `plan` what to do, and
 * executes one action at a time, never two at once for the same database. Operations go through
 * `runExclusive`, so they never overlap a heal or a rolling restart either. The actions live in
 * one file each next to this one and see the database through a `ClusterContext`.
 */
export class DatabaseController extends Cluster {
  /** The action or operation holding the lock, reported as the status while it runs. */
  busy?: string;
  /** One action or operation at a time; waiters queue in order and start as soon as it is free. */
  private readonly lock = new Mutex();
  readonly extras?: ControllerExtras;
  private readonly observer = new Observer();
  private readonly disk: DiskUsage;
  private readonly variables = new DynamicVariables();
  /** Set by a patch operation; settled when a rolling patch ends. */
  private patchRequested?: (err?: string) => void;
  private readonly rejoinFailures = new Map<number, number>();
  private retryAt = 0;
  private ticking = false;
  /** Called when an action or operation ends or a delete begins (see `watch`). */
  private readonly watchers = new Set<() => void>();
  private lastStatus = '';
  /** How many actions and operations have taken the lock: a plan is stale once another has. */
  private acquired = 0;

  constructor(deps: ControllerDeps & { extras?: ControllerExtras }) {
    super(deps);
    this.extras = deps.extras;
    this.disk = new DiskUsage(deps.clock, this.log, (msg) => this.emit('database_low_disk_space', msg, 'notification'));
  }

  /** Something true to report: not provisioned yet (no servers), or inspected by this run (every node listed, missing ones too). */
  get inspected(): boolean {
    return !this.state?.provisioned || this.observer.details.length > 0;
  }

  protected async seedData(): Promise<void> {
    if (!this.extras?.seed) throw new Error('this agent cannot build forks');
    await this.extras.seed(this);
  }

  /** Nodes whose server answered in the last observation. */
  private liveNodes(): number[] {
    return this.observer.details.filter((n) => n.state === 'running' && n.reachable).map((n) => n.index);
  }

  /** Replicas seen replicating in the last observation, most useful first. */
  healthyReplicas(): number[] {
    return this.observer.healthyReplicas(this.state?.primary);
  }

  /**
   * Observes the nodes again and lets the members accept PROXY headers from the data planes.
   * The roles reach the data planes' endpoints through the report (docs/databases.md,
   * "Database endpoints").
   */
  async refresh(): Promise<void> {
    await this.observe();
    await this.syncEndpoints();
  }

  /** Sets proxy_protocol_networks on the running members (database/endpoints.ts). */
  async syncEndpoints(): Promise<void> {
    const running = this.observer.details.filter((n) => n.state === 'running');
    const members = await Promise.all(running.map(async (n) => ({ index: n.index, target: await this.adminTarget(n.index) })));
    await applyProxyNetworks(this.log, members, this.wantedProxyNetworks());
  }

  /** The endpoints live on the data planes; a deleted or suspended database has nothing here. */
  async closeEndpoints(): Promise<void> {}

  private wantedProxyNetworks(): string {
    return proxyNetworks(this.desired?.proxySources ?? this.state?.desired?.proxySources ?? []);
  }

  /** Asks for a rolling patch now, whatever the window says; settles when it has run. */
  requestPatch(): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.patchRequested = (err) => (err ? reject(new Error(err)) : resolve());
    });
  }

  /** Applies a new linroot password now (before the control plane's desired state has it). */
  async resetCredentials(password: string): Promise<void> {
    await this.runExclusive('sync-accounts', async () => {
      // A fenced primary writes nothing (root's account changes would be transactions past the
      // position its fence answered); the control plane keeps the old password and says so.
      if (this.state?.fencedTerm !== undefined) throw new FulcrumError('conflict', 'the primary is fenced for a planned switchover or a move: try the reset again once it is over');
      if (password !== this.desired?.rootPassword) this.pendingPassword = password;
      await this.syncAccounts();
    });
  }

  /**
   * FenceOp, the first step of a planned switchover (docs/multi-host.md, "Planned switchover"):
   * the local primary `member` goes read-only while the cluster is still at `term` and stays so
   * (nothing promotes it back or writes there) until the control plane names another member or
   * abandons this fence (Cluster.followFence). Returns its GTID position once the commits in flight have finished.
   */
  async fence(term: number, member: number): Promise<string> {
    return this.runExclusive('switchover', async () => {
      await this.followDesired();
      const s = this.state;
      if (s && !this.spread && this.clusterSize === 1) return this.fenceToMove(s, term, member);
      if (!s || !this.spread) throw new FulcrumError('conflict', 'only a cluster spread over agents is switched over this way');
      if ((s.term ?? 0) !== term || s.primary !== member || !this.nodeIndexes().includes(member)) {
        throw new FulcrumError('conflict', `member ${member} is not this agent's primary at term ${term} (term ${s.term ?? 0}, primary ${s.primary})`);
      }
      // Saved first: an agent restarted in the middle keeps the member fenced.
      s.fencedTerm = term;
      await this.save();
      const position = await fencePrimary(await this.adminTarget(member));
      this.log.warn({ term, member, position }, 'primary fenced for a planned switchover');
      return position;
    });
  }

  /**
   * RestartMemberOp, one member's step of a rolling change across hosts: restarts the local
   * replica `member` with the desired spec (rolling.ts, restartMember). It takes the lock as a
   * rolling restart, so the archive round stops first (day-two beforeAction) and no heal overlaps.
   * `patch`: a patch's step, which restarts the member on the catalogue's build even when unchanged.
   */
  async restartMember(member: number, patch = false): Promise<boolean> {
    // An old primary first rejoins through the plan (errant check, its position handed over).
    await untilReplicating(() => this.observer.details.find((n) => n.index === member), () => this.state?.primary !== member, member);
    return this.runExclusive('rolling', async () => {
      await this.followDesired();
      if (!this.state || !this.spread) throw new FulcrumError('conflict', 'only a member of a cluster spread over agents is restarted this way');
      return restartMember(this.context, member, patch);
    });
  }

  async observe(): Promise<DbObs> {
    const s = this.state;
    const d = this.desired;
    if (s?.provisioned && d && !this.tls) await this.ensureTls();
    const obs = await this.observer.observe(this.context, {
      state: s,
      desired: d,
      linrootPassword: this.pendingPassword ?? d?.rootPassword ?? '',
      patchRequested: !!this.patchRequested,
      windowOpen: () => this.extras?.windowOpen(this) ?? false,
      resolveEngine: () => this.resolveEngine(),
      proxyNetworks: this.wantedProxyNetworks(),
      spread: this.spreadObs(),
    });
    this.noteHeldBack(obs);
    if (this.movingOut) obs.movingOut = true;
    if (s?.provisioned && d) this.disk.measureIfDue(join(this.dir, `n${s.primary}`, 'data'), d.type?.diskMb ?? 0);
    // The observation object is the one the report plans on, so convergence waits for these too.
    if (s?.provisioned && d && !s.suspended) {
      obs.variablesCurrent = await this.variables.current(this.context, d.dynamicOptions ?? {}, this.liveNodes()).catch((err) => {
        this.log.warn({ err }, 'engine_config variables could not be read');
        return false;
      });
    }
    return obs;
  }

  /**
   * One observe-plan-act round; does nothing while an action runs or another round is under
   * way, and drops its plan if an operation took the lock meanwhile (a plan made before a
   * restore or a switchover must not run after it).
   */
  async tick(): Promise<void> {
    if (!this.desired && this.state && this.busy && this.busy !== 'delete' && !this.deleted) {
      // A deleted database does not wait for a long action (a restore, a rolling restart) to end.
      this.log.info({ busy: this.busy }, 'deleting while an action runs');
      await this.remove().catch((err) => this.log.error({ err }, 'delete failed'));
      return;
    }
    if (this.busy || this.lock.locked || this.ticking || this.deleted) return;
    if (this.deps.clock.now() < this.retryAt && !this.state?.provisioned) return;
    this.ticking = true;
    try {
      await this.followDesired().catch((err) => this.log.error({ err }, 'could not save the database state'));
      // The round's baseline is taken only while no operation holds or waits for the lock: one
      // that took it during followDesired (a fence) counted in `acquired` before the round read
      // it, so its own increment did not mark the plan stale, and a plan observed before its
      // fence was recorded ran after it (a promote that made the fenced primary writable again).
      if (this.busy || this.lock.locked || this.deleted) return;
      const seen = this.acquired;
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
      if (!next || this.busy || this.lock.locked || this.deleted) return;
      // An operation that ran (or took the lock) since the observation makes the plan stale: a
      // fence that began during it would otherwise be undone by a promote planned before it.
      // Fence, observation, plan and action are thus in one order per database.
      await this.runExclusive(next.kind, async () => (this.acquired === seen + 1 ? this.execute(next) : undefined));
    } finally {
      this.ticking = false;
    }
  }

  /**
   * Calls `cb` whenever an action or operation ends (`busy` cleared, the state it changed saved)
   * or a delete begins, until the returned function is called: what waits on the database (an
   * operation waiting for its provisioning) is woken by the change itself, not a timer.
   */
  watch(cb: () => void): () => void {
    this.watchers.add(cb);
    return () => this.watchers.delete(cb);
  }

  private changed(): void {
    for (const cb of [...this.watchers]) cb();
  }

  /** Runs `fn` as the database's one action in flight; reports busy meanwhile. */
  runExclusive<T>(label: string, fn: () => Promise<T>): Promise<T> {
    return this.lock.run(async () => {
      this.acquired++;
      this.busy = label;
      this.deps.onChange();
      try {
        await this.extras?.beforeAction?.(this, label);
        return await fn();
      } finally {
        // A delete that overtook this action (see tick) sweeps whatever the action re-created.
        if (this.deleted && label !== 'delete') await this.remove().catch((err) => this.log.error({ err }, 'delete sweep failed'));
        this.busy = undefined;
        this.deps.onChange();
        this.changed();
      }
    });
  }

  report(): ObservedDatabase {
    const out = reportDatabase({
      id: this.id,
      state: this.state,
      desired: this.desired ?? this.state?.desired,
      clusterSize: this.clusterSize,
      busy: this.busy,
      details: this.observer.details,
      lastObs: this.observer.last,
      obsGeneration: this.observer.generation,
      lastStatus: this.lastStatus,
      nodeName: (k) => this.nodeName(k),
      primaryAddress: this.primaryAddress(),
      caPem: this.tls?.caPem ?? '',
      events: this.events,
      usedDiskMb: this.disk.mb,
    });
    this.lastStatus = out.status ?? '';
    return { ...out, ...(this.extras?.extraReport(this) ?? {}) };
  }

  private async execute(a: Action): Promise<void> {
    const end = this.deps.metrics?.actionSeconds.startTimer({ action: a.kind });
    const started = Date.now();
    try {
      await this.run(a);
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
  private async run(a: Action): Promise<void> {
    try {
      switch (a.kind) {
        case 'provision':
          // A new database's state starts with the control plane's backup key (backup-key.ts).
          this.state ??= { ...newDbState(this.id), ...(this.desired?.backupKey ? { backupKey: this.desired.backupKey } : {}) };
          return await provision(this.context);
        case 'delete': return await this.remove();
        case 'suspend': return await suspend(this.context);
        case 'resume': return await resume(this.context);
        case 'restart-primary': return await restartPrimary(this.context);
        case 'promote-primary': return await promotePrimary(this.context);
        case 'failover':
          await failover(this.context, this.observer.liveReplicas(this.state!.primary), this.observer.lastKnownGtid(this.state!.primary));
          return;
        case 'rejoin':
          await rejoin(this.context, a.index, a.rebuild || (this.rejoinFailures.get(a.index) ?? 0) >= REBUILD_AFTER_FAILURES, (k) => this.extras?.seedMember?.(this, k));
          this.rejoinFailures.delete(a.index);
          return;
        case 'acknowledge': return await acknowledge(this.context, a.index);
        case 'hold-acks': return await holdAgain(this.context, a.index);
        case 'rolling':
          await rolling(this.context, a.reason);
          if (a.reason === 'patch') this.settlePatch();
          return;
        case 'scale': return await scale(this.context, a.to);
        case 'sync-accounts': return await this.syncAccounts();
        case 'sync-proxies': return await this.syncEndpoints();
        case 'sync-variables': return await this.variables.apply(this.context, this.desired?.dynamicOptions ?? {}, this.liveNodes());
      }
    } catch (err) {
      const msg = (err as Error).message;
      this.log.error({ err, action: a.kind }, 'action failed');
      if (a.kind === 'provision' && this.state) {
        this.state.error = `provisioning failed: ${msg}`;
        this.retryAt = this.deps.clock.now() + PROVISION_RETRY_MS;
        await this.save();
        this.emit('database_create', this.state.error, 'failed');
      }
      // A rejoin stopped because the node was named primary meanwhile is no failure of the node.
      if (a.kind === 'rejoin' && !(this.spread && namedPrimaryAhead(this.desired, this.state ?? {}, a.index))) this.rejoinFailures.set(a.index, (this.rejoinFailures.get(a.index) ?? 0) + 1);
      if (a.kind === 'rolling' && a.reason === 'patch') this.settlePatch(msg);
      throw err;
    }
  }

  private settlePatch(err?: string): void {
    this.patchRequested?.(err);
    this.patchRequested = undefined;
  }

  /** Deletes the database (see remove.ts); on failure it stays known, so the next round retries. */
  private async remove(): Promise<void> {
    this.deleted = true;
    this.changed();
    try {
      // First: a copy still reading a server, or writing into the backups folder, would fail
      // loudly once those go, or re-create the folder after it was removed.
      await this.extras?.stopWork?.(this);
      await remove(this.context, { keepBackups: !this.movingOut && !!this.extras?.removeStored });
      if (this.movingOut) this.log.warn('removed here after its move to another host; its backups and binlog archive in the store are kept (it was rebuilt there from them)');
      else await this.extras?.removeStored?.(this);
    } catch (err) {
      this.deleted = false;
      throw err;
    }
    this.state = undefined;
    this.log.info('deleted');
  }
}
