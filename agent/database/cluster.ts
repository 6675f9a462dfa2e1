import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { systemClock, type Clock } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentEvent } from '../../proto/gen/fulcrum/v1/AgentEvent.js';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { allocateAddresses } from '../address-pool.js';
import type { AgentMetrics } from '../agent-metrics.js';
import { resolveEngine, type Catalogue } from '../catalogue.js';
import { q, withAdmin, type AdminTarget } from '../mysql/admin.js';
import { remoteVariables, type RemoteMember } from '../mysql/remote.js';
import { waitForGtid } from '../mysql/replication.js';
import { ensureClusterTls, ensureKeyFile, installClusterCa, type ClusterTls } from '../mysql/tls.js';
import type { ContainerRuntime, NodeSpec } from '../runtime/container-runtime.js';
import { syncAccounts } from './accounts.js';
import type { ClusterContext } from './context.js';
import { fencePrimary } from './failover.js';
import { buildNodeSpec, nodeName } from './node-spec.js';
import { markedSeeding, promotionHeldBack, type DbObs, type SpreadObs } from './plan.js';
import { databaseDir, followMoveFence, loadDbState, NODE_PORT, saveDbState, type DbState } from './state.js';

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

/**
 * One database's facts: its desired and persisted state, its nodes (names, specs, admin
 * access, TLS material) and its events. The controller (controller.ts) adds the action loop on
 * top and supplies `refresh` and `closeEndpoints`; `context` is the narrow view actions get.
 */
export abstract class Cluster {
  /** The control plane's desired database; undefined once it is to be deleted. */
  desired?: DesiredDatabase__Output;
  state?: DbState;
  /** Set once a delete has started; nothing is saved any more. */
  deleted = false;
  private saving: Promise<void> = Promise.resolve();
  /** Overrides the desired password while a credentials reset is being applied. */
  protected pendingPassword?: string;
  readonly log: Logger;
  /** The database as its actions see it (live, read-only views of this object). */
  protected readonly context: ClusterContext;
  protected tls?: ClusterTls;
  private keyfile?: string;
  protected readonly events: AgentEvent[] = [];

  constructor(readonly deps: ControllerDeps) {
    this.log = deps.logger.child({ component: 'database', database: deps.id });
    this.state = loadDbState(deps.stateDir, deps.id);
    this.context = this.makeContext();
  }

  /**
   * The one way the agent hands over the control plane's desired database (undefined: delete
   * it). A credentials reset in progress ends once the desired state carries its password.
   */
  setDesired(d: DesiredDatabase__Output | undefined): void {
    this.desired = d;
    if (d && this.pendingPassword && this.pendingPassword === d.rootPassword) this.pendingPassword = undefined;
  }

  /** Observes the nodes again and lets the members accept PROXY headers from the data planes. */
  abstract refresh(): Promise<void>;
  abstract closeEndpoints(): Promise<void>;
  /** A fork's data (the controller asks the day-two services). */
  protected abstract seedData(): Promise<void>;

  get id(): number {
    return this.deps.id;
  }
  get dir(): string {
    return databaseDir(this.deps.stateDir, this.deps.id);
  }
  get clusterSize(): number {
    return this.state?.addresses.length || this.desired?.clusterSize || 1;
  }
  get semiSync(): boolean {
    const d = this.desired ?? this.state?.desired;
    return d?.replicationType === 'semi_synch' && this.clusterSize > 1;
  }
  /**
   * Some members run on other agents (docs/databases.md, "Clusters across hosts"): this agent
   * runs only its local members and follows the control plane's term and primary.
   */
  get spread(): boolean {
    const d = this.desired ?? this.state?.desired;
    return (d?.members ?? []).some((m) => !m.local);
  }
  /**
   * Named deleted by the control plane (AgentDesired.deleted_databases), not moved: a fence to
   * move it no longer counts (the delete abandoned the move), so its objects in the store go.
   */
  deletedByControlPlane = false;
  /** A 1-node database fenced to move to another host (FenceOp on a database not spread over agents). */
  get movingOut(): boolean {
    return !this.spread && this.state?.fencedTerm !== undefined && !this.deletedByControlPlane;
  }
  nodeName(k: number): string {
    return nodeName(this.deps.agentKey, this.id, k);
  }
  /** The members this agent runs: all of them, or only the local ones of a spread cluster. */
  nodeIndexes(): number[] {
    const d = this.desired ?? this.state?.desired;
    if (this.spread) return (d?.members ?? []).filter((m) => m.local).map((m) => m.index).sort((a, b) => a - b);
    return Array.from({ length: this.clusterSize }, (_, i) => i + 1);
  }
  /** The primary of a spread cluster when it runs on another agent (undefined: it is local, or not known yet). */
  remotePrimary(): RemoteMember | undefined {
    const s = this.state;
    const d = this.desired ?? s?.desired;
    if (!s || !d || !this.spread || this.nodeIndexes().includes(s.primary)) return undefined;
    const host = s.addresses[s.primary - 1];
    if (!host) return undefined;
    return { host, port: NODE_PORT, password: s.replPassword, caPem: d.clusterCaPem };
  }
  /** The primary's GTID state (gtid_binlog_state), over its socket or, on another host, the network. */
  async primaryBinlogState(): Promise<string> {
    const remote = this.remotePrimary();
    if (remote) return (await remoteVariables(remote, ['gtid_binlog_state'])).gtid_binlog_state!;
    if (this.spread && !this.nodeIndexes().includes(this.state!.primary)) throw new Error('the primary\'s address is not known yet');
    return withAdmin(await this.adminTarget(this.state!.primary), async (c) => String((await q(c, 'SELECT @@gtid_binlog_state AS s'))[0]?.s ?? ''));
  }
  /** Whether the named primary is still read-only (not promoted yet, or held back for lack of its position). */
  async primaryReadOnly(): Promise<boolean> {
    const remote = this.remotePrimary();
    if (remote) return Number((await remoteVariables(remote, ['read_only'])).read_only) === 1;
    return withAdmin(await this.adminTarget(this.state!.primary), async (c) => Number((await q(c, 'SELECT @@read_only AS r'))[0]?.r) === 1);
  }

  /**
   * The state follows the control plane: the database's backup key once one is sent (a key
   * already held stays, agent/backup/backup-key.ts), and for a spread cluster the other members'
   * addresses as their agents reported them and the primary it names for the highest term seen.
   * A desired state of an older term than one already followed is refused (a stale or replayed
   * message must not turn an old primary back on).
   */
  async followDesired(): Promise<void> {
    const s = this.state;
    const d = this.desired;
    if (!s || !d) return;
    let changed = false;
    // Taken before any object needs it, so a restore or fork here reads what others wrote.
    if (!s.backupKey && d.backupKey) {
      s.backupKey = d.backupKey;
      changed = true;
    }
    if (this.spread && this.followMembers(s, d)) changed = true;
    // A 1-node database fenced to move: only the word that this very move was abandoned lifts it (said once per term).
    const move = this.spread ? 'none' : followMoveFence(s, Number(d.term), Number(d.fenceLiftedTerm ?? 0));
    if (move === 'lifted' || (move === 'kept' && this.keptMoveFence !== Number(d.term))) this.log.warn({ term: Number(d.term) }, move === 'lifted' ? 'the move to another host was abandoned: the node serves writes again' : 'a higher term without the word that the move was abandoned: the node stays read-only');
    this.keptMoveFence = Number(d.term);
    if (move === 'lifted') changed = true;
    if (changed) await this.save();
  }
  private keptMoveFence = -1;

  private followMembers(s: DbState, d: DesiredDatabase__Output): boolean {
    let changed = false;
    while (s.addresses.length < d.clusterSize) s.addresses.push('');
    for (const m of d.members) {
      if (m.local || m.index < 1 || m.index > d.clusterSize) continue;
      const host = m.address.slice(0, Math.max(0, m.address.lastIndexOf(':')));
      if (host && s.addresses[m.index - 1] !== host) {
        s.addresses[m.index - 1] = host;
        changed = true;
      }
    }
    const term = Number(d.term);
    if (term < (s.term ?? 0)) {
      if (this.refusedTerm !== term) this.log.warn({ term, followed: s.term }, 'refused a desired state of an older term');
      this.refusedTerm = term;
    } else if (d.primaryMember > 0 && (term > (s.term ?? 0) || d.primaryMember !== s.primary)) {
      if (d.primaryMember !== s.primary) this.log.info({ term, primary: d.primaryMember, was: s.primary }, 'the control plane names a new primary');
      if (s.fencedTerm !== undefined) this.followFence(s, d, term);
      s.term = term;
      s.primary = d.primaryMember;
      changed = true;
    }
    return changed;
  }
  private refusedTerm = -1;

  /**
   * A fenced primary is made writable again only by the control plane's explicit word that its
   * switchover was abandoned (DesiredDatabase.fence_lifted_term, the fence's own term) while it
   * is still the member named primary. Another member named primary ends the fence: this one is
   * an old primary now and rejoins as a replica (errant check first). A higher term naming it
   * again without that word keeps it fenced: it answered a position another member was promoted
   * for, or may have been, and a write past it would be errant there (the control plane fails
   * over from a primary reported "fenced").
   */
  private followFence(s: DbState, d: DesiredDatabase__Output, term: number): void {
    const fencedTerm = s.fencedTerm!;
    if (d.primaryMember !== s.primary) {
      s.fencedTerm = undefined;
    } else if (term > fencedTerm && Number(d.fenceLiftedTerm ?? 0) === fencedTerm) {
      this.log.warn({ term, fenced: fencedTerm, member: s.primary }, 'the control plane abandoned the planned switchover: the primary serves writes again');
      s.fencedTerm = undefined;
    } else if (term > fencedTerm) {
      this.log.warn({ term, fenced: fencedTerm, member: s.primary }, 'a higher term names the fenced primary again without abandoning its switchover: it stays fenced');
    }
  }

  /** What the plan of a spread cluster needs beyond the local nodes (undefined: not spread). */
  spreadObs(): SpreadObs | undefined {
    const s = this.state;
    if (!this.spread) return undefined;
    return {
      local: this.nodeIndexes(), primaryKnown: !!s?.addresses[(s?.primary ?? 1) - 1], semiSyncWanted: this.semiSync,
      fenced: s?.fencedTerm !== undefined,
      promotionPosition: this.promotionPosition(), seeding: s?.seeding, marked: markedSeeding(this.desired ?? s?.desired),
    };
  }

  /**
   * The GTID position the control plane named the followed primary for in the followed term
   * ('' when none was sent, an older control plane, or the desired state is of another term).
   */
  promotionPosition(): string {
    const s = this.state;
    const d = this.desired;
    if (!s || !d || Number(d.term) !== (s.term ?? 0) || d.primaryMember !== s.primary) return '';
    return d.primaryPosition ?? '';
  }

  /** Says once per term that the local primary is not promoted for lack of its position. */
  protected noteHeldBack(obs: DbObs): void {
    const s = this.state;
    const p = obs.nodes.find((n) => n.index === obs.primary);
    if (!s || !promotionHeldBack(obs.spread, p) || this.heldBackTerm === s.term) return;
    this.heldBackTerm = s.term ?? 0;
    this.emit('database_failover', `node ${obs.primary} is named primary for term ${s.term} at position ${obs.spread!.promotionPosition} but holds only ${p!.gtid || 'nothing'}: it is not promoted (acknowledged writes would be lost); the control plane names another member`, 'failed');
  }
  private heldBackTerm = -1;

  /**
   * FenceOp on a 1-node database, the first step of its move to another host (docs/multi-host.md,
   * "Draining a host"): its node goes read-only and stays so (no promote, no restart into writes)
   * until it is removed here or the control plane says the move was abandoned (followMoveFence). Returns
   * its GTID position once the commits in flight have finished; the caller then archives up to it.
   */
  protected async fenceToMove(s: DbState, term: number, member: number): Promise<string> {
    if (!s.provisioned || member !== 1 || s.primary !== 1) throw new FulcrumError('conflict', `member ${member} is not this 1-node database's running node`);
    if (Number(this.desired?.term ?? 0) !== term) throw new FulcrumError('conflict', `the move was asked at term ${term}, the database is at term ${Number(this.desired?.term ?? 0)}`);
    // Saved first: an agent restarted in the middle keeps the node fenced (and the store's objects on removal).
    s.term = term;
    s.fencedTerm = term;
    await this.save();
    const position = await fencePrimary(await this.adminTarget(1));
    this.log.warn({ term, position }, 'node fenced to move the database to another host');
    return position;
  }
  /**
   * CatchUpOp, the second step of a planned switchover (the fence, controller.ts, is the first):
   * the local replica `member` waits until it has applied `position` (the fenced primary's).
   * Fails with a conflict when it has not within `timeoutMs`.
   */
  async catchUp(member: number, position: string, timeoutMs: number): Promise<void> {
    if (!this.nodeIndexes().includes(member)) throw new FulcrumError('conflict', `member ${member} does not run on this agent`);
    const seconds = Math.max(1, Math.ceil(timeoutMs / 1000));
    const reached = await withAdmin(await this.adminTarget(member), (c) => waitForGtid(c, position, seconds));
    if (!reached) throw new FulcrumError('conflict', `member ${member} did not apply ${position} within ${seconds} s`);
  }

  async adminTarget(k: number): Promise<AdminTarget> {
    const c = await this.deps.runtime.connection(this.nodeName(k));
    return { socketPath: c.socketPath, password: this.state!.adminPassword };
  }
  primaryAddress(): string {
    return this.state?.addresses[(this.state?.primary ?? 1) - 1] ?? '';
  }
  /** The node spec the desired state calls for (with the binary/image in state.running). */
  nodeSpec(k: number): NodeSpec {
    return buildNodeSpec({
      agentId: this.deps.agentId, agentKey: this.deps.agentKey, databaseId: this.id, dir: this.dir,
      desired: this.desired ?? this.state!.desired!, state: this.state!, tls: this.tls!, keyfile: this.keyfile, semiSync: this.semiSync,
      spread: this.spread,
    }, k);
  }

  emit(action: string, message: string, status = 'finished'): void {
    this.events.push({ id: randomUUID(), action, message, atMs: this.deps.clock.now(), status });
    if (this.events.length > 20) this.events.splice(0, this.events.length - 20);
    this.log.info({ action }, message);
    this.deps.onChange();
  }

  /**
   * Saves run one after another, and a removal waits for the one in flight (settleSaves): a save
   * that raced a delete (a backup or archive round still numbering its ids) could otherwise
   * re-create the database's folder just after the removal swept it.
   */
  async save(): Promise<void> {
    const run = this.saving.then(() => (this.state && !this.deleted ? saveDbState(this.deps.stateDir, this.state) : undefined));
    this.saving = run.catch(() => undefined);
    await run;
  }

  settleSaves(): Promise<void> {
    return this.saving;
  }

  async syncAccounts(): Promise<void> {
    await syncAccounts(this.context);
  }

  protected resolveEngine(): DbState['running'] {
    const d = this.desired!;
    const e = resolveEngine(this.deps.catalogue, { engineId: d.engineId, binary: d.binary || undefined, image: d.image || undefined }, this.deps.runtimeKind);
    return { binary: e.binary, image: e.image, version: e.version };
  }

  protected async ensureTls(): Promise<void> {
    const d = this.desired ?? this.state!.desired!;
    const dir = join(this.dir, 'tls');
    if (this.spread) {
      // The control plane's cluster CA: this agent's members get a certificate for their own
      // addresses (and the endpoints), signed by the CA every member verifies its primary with.
      if (!d.clusterCaPem || !d.clusterCaKeyPem) throw new Error('the control plane sent no CA for this cluster spread over agents');
      await installClusterCa(dir, d.clusterCaPem, d.clusterCaKeyPem);
    } else if (d.clusterCaPem && d.clusterCaKeyPem && !this.state!.provisioned) {
      // A 1-node database whose CA the control plane made: the same CA on whichever host it is
      // built (or rebuilt after a lost host). Installed before the first start only, so a running
      // database never changes CA under its clients.
      await installClusterCa(dir, d.clusterCaPem, d.clusterCaKeyPem);
    }
    const own = this.spread ? this.nodeIndexes().map((k) => this.state!.addresses[k - 1] ?? '') : this.state!.addresses;
    this.tls = await ensureClusterTls(dir, this.id, [...own, d.hostPrimary, d.hostSecondary]);
    if (d.encrypted) this.keyfile = await ensureKeyFile(join(this.dir, 'tls'));
  }

  private makeContext(): ClusterContext {
    const state = () => this.state!;
    const spec = () => this.desired ?? this.state!.desired!;
    const semiSync = () => this.semiSync;
    const spread = () => this.spread;
    return {
      id: this.id,
      log: this.log,
      runtime: this.deps.runtime,
      agentId: this.deps.agentId,
      dir: this.dir,
      backupsDir: join(this.deps.stateDir, 'backups', String(this.id)),
      get spec() { return spec(); },
      get state() { return state(); },
      get semiSync() { return semiSync(); },
      get spread() { return spread(); },
      nodeIndexes: () => this.nodeIndexes(),
      nodeName: (k) => this.nodeName(k),
      nodeSpec: (k) => this.nodeSpec(k),
      adminTarget: (k) => this.adminTarget(k),
      clusterNode: async (k) => ({ index: k, address: this.state!.addresses[k - 1]!, port: NODE_PORT, admin: await this.adminTarget(k) }),
      primaryAddress: () => this.primaryAddress(),
      primaryBinlogState: () => this.primaryBinlogState(),
      primaryReadOnly: () => this.primaryReadOnly(),
      remotePrimary: () => this.remotePrimary(),
      resolveEngine: () => this.resolveEngine(),
      allocateAddresses: (count) => allocateAddresses(this.deps.nodeAddressPool, count, this.deps.takenAddresses()),
      ensureTls: () => this.ensureTls(),
      save: () => this.save(),
      emit: (action, message, status) => this.emit(action, message, status),
      wait: waitFor,
      syncAccounts: () => this.syncAccounts(),
      linrootPassword: () => this.pendingPassword ?? spec().rootPassword,
      refresh: () => this.refresh(),
      closeEndpoints: () => this.closeEndpoints(),
      settleSaves: () => this.settleSaves(),
      seed: () => this.seedData(),
    };
  }
}

/** Polls real servers, so wall time whatever clock the agent was given. */
async function waitFor(cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = systemClock.now() + timeoutMs;
  for (;;) {
    try {
      if (await cond()) return;
    } catch {
      // Retry until the deadline.
    }
    if (systemClock.now() > end) throw new Error('timed out waiting for the cluster');
    await systemClock.sleep(100);
  }
}
