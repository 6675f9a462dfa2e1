import { randomBytes, randomUUID } from 'node:crypto';
import { FulcrumError } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import { nextWindowStart } from '../../../lib/maintenance-window.js';
import type { Notice } from '../account/account-service.js';
import type { AddressRepository } from '../ports.js';
import type { DatabaseRepository } from './repository.js';
import type { Actor, AuthService } from '../auth/auth-service.js';
import type { EntityRef, EventService } from '../events/event-service.js';
import type { RegionCatalogue } from '../regions.js';
import type { AddressPools } from '../address-pools.js';
import { parseEngineId, type EngineCatalogue } from './catalogue.js';
import type { AgentRecord, BackupRecord, DatabaseRecord, MemberPlacement, OperationKind } from './model.js';
import { refuseSuspendWhileMoving, refuseWhileDraining, spansAgents } from './placement.js';
import { needsRollingRestart } from './engine-config.js';
import { patchAcrossHosts, pendingUpdates, updatesWindow } from './patch-rollout.js';
import { requireStatus } from './status-rules.js';
import { findType } from './types.js';
import { withForkDefaults } from './fork-request.js';
import { newBackupKey } from './backup-key.js';
import { defaultUpdates, validateCreate, validateSnapshot, validateUpdate } from './validation.js';

type Body = Record<string, unknown>;

export interface DatabaseServiceDeps {
  repo: DatabaseRepository;
  addresses: AddressRepository;
  auth: AuthService;
  events: EventService;
  regions: RegionCatalogue;
  engines: EngineCatalogue;
  clock: Clock;
  /** Pools for endpoint addresses (hosts.primary / hosts.secondary) per region, e.g. 127.78.0.0/16. */
  pool: AddressPools;
  /** Called after every committed change of desired state; the agent server pushes. */
  onChange: () => void;
}

export const MAX_SNAPSHOTS = 3;

/** linroot passwords: 16 characters of letters, digits, `.` and `_`, as on the real service. */
function generatePassword(): string {
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._';
  return [...randomBytes(16)].map((b) => alphabet[b % alphabet.length]).join('');
}

export function databaseRef(d: Pick<DatabaseRecord, 'id' | 'label'>): EntityRef {
  return { id: d.id, type: 'database', label: d.label, url: `/v4/databases/mysql/instances/${d.id}` };
}

/**
 * Managed MySQL databases: validation, status preconditions, the stored desired state, and the
 * events clients poll. Long work is handed to the agent (desired state or one-off operations);
 * the observer (observer.ts) completes it when the agent reports back.
 */
export class DatabaseService {
  constructor(private readonly d: DatabaseServiceDeps) {}

  private now(): number {
    return Math.floor(this.d.clock.now() / 1000) * 1000;
  }

  private async live(): Promise<DatabaseRecord[]> {
    return (await this.d.repo.list()).filter((x) => !x.deleting);
  }

  /** The labels of live databases (but `except`), for the validators' synchronous check. */
  private async labels(except?: number): Promise<Set<string>> {
    return new Set((await this.live()).filter((x) => x.id !== except).map((x) => x.label));
  }

  /**
   * `updates.pending`: a new engine build the agent holds for the maintenance window, planned for
   * the window's next start. No deadline: nothing forces it before the window (docs/databases.md).
   */
  pendingUpdates(db: DatabaseRecord): { deadline: string | null; description: string; planned_for: string | null }[] {
    return pendingUpdates(db, this.d.clock.now());
  }

  /**
   * Notifications for GET /account/notifications: a database with a new engine build waiting
   * for its maintenance window has maintenance scheduled, at the window's next start.
   */
  async maintenanceNotices(): Promise<Notice[]> {
    const out: Notice[] = [];
    for (const db of await this.live()) {
      if (!db.patchPending) continue;
      const start = nextWindowStart(updatesWindow(db.updates), this.d.clock.now());
      out.push({
        type: 'maintenance_scheduled', severity: 'minor', label: 'Database maintenance scheduled',
        message: `A new build of the database engine will be applied to ${db.label} with a rolling restart in its next maintenance window.`,
        entity: { kind: 'database', id: db.id, label: db.label, url: `/v4/databases/mysql/instances/${db.id}` },
        when: start ?? null, until: start === undefined ? null : start + db.updates.duration * 3_600_000,
      });
    }
    return out;
  }

  async list(actor: Actor): Promise<DatabaseRecord[]> {
    return (await this.live()).filter((x) => this.d.auth.canRead(actor, 'database', x.id));
  }

  async get(actor: Actor, id: number, access: 'read_only' | 'read_write' = 'read_only'): Promise<DatabaseRecord> {
    const db = await this.d.repo.get(id);
    if (!db || db.deleting) throw FulcrumError.notFound();
    this.d.auth.requireAccess(actor, 'database', id, access);
    return db;
  }

  async create(actor: Actor, body: Body): Promise<DatabaseRecord> {
    this.d.auth.requireAddGrant(actor, 'database');
    const created = await this.d.repo.transaction(async () => {
      const labels = await this.labels();
      // The fork source is read before validation, which is synchronous.
      const forkId = (body as { fork?: { source?: unknown } } | null)?.fork?.source;
      const src = typeof forkId === 'number' && Number.isSafeInteger(forkId) && forkId > 0 ? await this.d.repo.get(forkId) : undefined;
      // A fork may leave out what its source decides (withForkDefaults); only a source the
      // caller can read fills them in, so the defaults reveal nothing about another's database.
      const readable = src && !src.deleting && this.d.auth.canRead(actor, 'database', src.id) ? src : undefined;
      const request = this.d.engines.exactEngineIn(readable && body.fork !== undefined && body.fork !== null ? withForkDefaults(body, readable, (l) => labels.has(l)) : body);
      const input = validateCreate(request, {
        engineExists: (id) => parseEngineId(id) !== undefined && this.d.engines.get(id) !== undefined,
        regionExists: (id) => this.d.regions.has(id, 'Managed Databases'),
        typeExists: (id) => findType(id) !== undefined,
        labelTaken: (l) => labels.has(l),
        forkSource: (id) => {
          if (!src || src.id !== id || src.deleting || !this.d.auth.canRead(actor, 'database', id)) return undefined;
          return { status: src.status, engineId: src.engineId, oldestRestoreMs: src.oldestRestoreMs ?? null };
        },
        nowMs: this.d.clock.now(),
      });
      const engine = this.d.engines.get(input.engineId)!;
      const now = this.now();
      const row = await this.d.repo.create({
        label: input.label, region: input.region, type: input.type, engineId: engine.id, version: engine.version,
        image: engine.image, binary: engine.binary, clusterSize: input.clusterSize, replicationType: input.replicationType,
        encrypted: input.encrypted, sslConnection: input.sslConnection, allowList: input.allowList,
        updates: input.updates ?? defaultUpdates(), status: 'provisioning', hostPrimary: '', hostSecondary: null, port: 3306,
        provisioned: false, members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: input.engineConfig, rootPassword: generatePassword(), nextPassword: null,
        generation: 1, convergedGeneration: 0, runState: 'running', agentId: null, term: 1, primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false,
        deleteEventId: null, lastError: null, created: now, updated: now, fork: input.fork ?? null, oldestRestoreMs: null, backupKey: newBackupKey(),
      });
      const primary = await this.d.addresses.allocate(this.d.pool.forRegion(input.region), 'database', row.id);
      // Every cluster gets a secondary endpoint as on the real service (for 1 node it reaches
      // the primary too); the data planes serve both (docs/databases.md, "Database endpoints").
      const secondary = await this.d.addresses.allocate(this.d.pool.forRegion(input.region), 'database', row.id);
      if (!primary || !secondary) throw FulcrumError.conflict('No database endpoint addresses are left in the pool');
      const event = await this.d.events.record('database_create', databaseRef(row), { username: actor.user.username });
      return this.d.repo.update(row.id, { hostPrimary: primary, hostSecondary: secondary, pendingEventId: event.id });
    });
    await this.d.auth.grantCreator(actor, 'database', created.id);
    this.d.onChange();
    return created;
  }

  async update(actor: Actor, id: number, body: Body): Promise<DatabaseRecord> {
    const { updated, changed } = await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      requireStatus(db.status, 'update');
      const labels = await this.labels(id);
      const members = await this.d.repo.members(id);
      const canRun = await this.agentsCanRun(db, members);
      const input = validateUpdate(body, {
        labelTaken: (l) => labels.has(l),
        typeDisk: (t) => findType(t)?.disk,
        currentType: db.type,
        currentUpdates: db.updates,
        currentEngineConfig: db.engineConfig,
        currentClusterSize: db.clusterSize,
        currentVersion: db.version,
        currentEngineId: db.engineId,
        // Scaling seeds members on the database's own agent; a cluster spread over agents is not scaled.
        spansAgents: spansAgents(members),
        // A series names the newest build this database's agents run, else the newest anywhere (refused below).
        engineForVersion: (v) => (this.d.engines.forVersion(v, canRun) ?? this.d.engines.forVersion(v))?.id,
        engineUsable: canRun,
      });
      const patch: Partial<DatabaseRecord> = {};
      if (input.label !== undefined && input.label !== db.label) patch.label = input.label;
      if (input.allowList !== undefined && JSON.stringify(input.allowList) !== JSON.stringify(db.allowList)) patch.allowList = input.allowList;
      if (input.updates !== undefined && JSON.stringify(input.updates) !== JSON.stringify(db.updates)) patch.updates = input.updates;
      if (input.type !== undefined) patch.type = input.type;
      if (input.engineConfig !== undefined && JSON.stringify(input.engineConfig) !== JSON.stringify(db.engineConfig)) patch.engineConfig = input.engineConfig;
      if (input.engineId !== undefined) {
        const e = this.d.engines.get(input.engineId)!;
        Object.assign(patch, { engineId: e.id, version: e.version, image: e.image, binary: e.binary });
      }
      if (input.clusterSize !== undefined) {
        // A scale keeps the replication a new database of that size gets by default (docs/databases.md, "Scaling").
        Object.assign(patch, { clusterSize: input.clusterSize, replicationType: input.clusterSize === 3 ? 'semi_synch' : 'none' });
      }
      if (Object.keys(patch).length === 0) return { updated: db, changed: false };
      if (spansAgents(members) && needsRollingRestart(db, patch)) await refuseWhileDraining(this.d.repo, members);
      // What the real service shows and records, and what Terraform waits for: a plan or size change
      // is a resize (database_resize, status resizing); anything else, a version upgrade included, is
      // an update (database_update). A PUT doing both records both, completed by the same convergence.
      const resizeKeys = new Set(['type', 'clusterSize', 'replicationType']);
      const resize = patch.type !== undefined || patch.clusterSize !== undefined;
      const update = Object.keys(patch).some((k) => !resizeKeys.has(k));
      const ref = databaseRef({ id, label: patch.label ?? db.label });
      const record = async (action: string) => (await this.d.events.record(action, ref, { username: actor.user.username })).id;
      const resizeEvent = resize ? await record('database_resize') : null;
      const updateEvent = update ? await record('database_update') : null;
      // Every member of a scaled database runs on the agent that runs it now; the new members are seeded there from the primary (docs/databases.md, "Scaling").
      if (patch.clusterSize !== undefined && db.agentId !== null) await this.d.repo.setMembers(id, Array.from({ length: patch.clusterSize }, () => db.agentId!));
      // A restart the change needs rolls out at once: on one host the agent leads, spread over hosts the control plane (rollout.ts).
      if (spansAgents(members) && needsRollingRestart(db, patch)) await this.d.repo.createOperation({ id: randomUUID(), databaseId: id, kind: 'rollout', payload: {}, eventId: null, state: 'pending', error: null, created: this.d.clock.now() });
      const updated = await this.d.repo.update(id, {
        ...patch, status: resize ? 'resizing' : 'updating', generation: db.generation + 1,
        pendingEventId: (updateEvent ?? resizeEvent)!, secondEventId: updateEvent !== null ? resizeEvent : null, updated: this.now(),
      });
      return { updated, changed: true };
    });
    if (changed) this.d.onChange();
    return updated;
  }

  /**
   * Whether every agent running a member of the database reports an engine among those it can run:
   * the catalogue lists what some agent runs (a docker host with a newer image), and an upgrade its
   * own agents cannot run would never converge. An agent not known yet counts as able. Read before
   * validation, which is synchronous.
   */
  private async agentsCanRun(db: DatabaseRecord, members: MemberPlacement[]): Promise<(engineId: string) => boolean> {
    const ids = new Set([db.agentId, ...members.map((m) => m.agentId)].filter((a): a is string => !!a));
    const known: AgentRecord[] = [];
    for (const a of ids) {
      const rec = await this.d.repo.agent(a);
      if (rec) known.push(rec);
    }
    return (engineId) => known.every((rec) => rec.engines.some((e) => e.id === engineId));
  }

  async delete(actor: Actor, id: number): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      this.d.auth.requireUnrestricted(actor);
      requireStatus(db.status, 'delete');
      const event = await this.d.events.record('database_delete', databaseRef(db), { username: actor.user.username });
      for (const op of await this.d.repo.pendingOperations(id)) {
        await this.d.repo.finishOperation(op.id, 'failed', 'The database was deleted');
        if (op.eventId) await this.d.events.complete(op.eventId, 'failed', 'The database was deleted');
      }
      await this.d.repo.update(id, { deleting: true, deleteEventId: event.id, updated: this.now() });
      // Nothing runs it yet: nothing to wait for.
      if (!db.agentId) await this.purge(id);
    });
    this.d.onChange();
  }

  /** Drops a deleted database for good once no agent runs it, releasing its addresses. */
  async purge(id: number): Promise<void> {
    const db = await this.d.repo.get(id);
    if (!db) return;
    if (db.deleteEventId) await this.d.events.complete(db.deleteEventId, 'finished');
    await this.d.repo.purge(id);
    await this.d.addresses.release('database', id);
  }

  async credentials(actor: Actor, id: number): Promise<{ username: string; password: string }> {
    const db = await this.get(actor, id);
    requireStatus(db.status, 'credentials');
    return { username: 'linroot', password: db.rootPassword };
  }

  async resetCredentials(actor: Actor, id: number): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      this.d.auth.requireUnrestricted(actor);
      requireStatus(db.status, 'resetCredentials');
      if (db.nextPassword) throw FulcrumError.conflict('A credentials reset is already in progress.');
      const password = generatePassword();
      await this.d.repo.update(id, { nextPassword: password, generation: db.generation + 1 });
      await this.operation(actor, db, 'resetCredentials', { new_password: password }, 'database_credentials_reset');
    });
    this.d.onChange();
  }

  async ssl(actor: Actor, id: number): Promise<{ ca_certificate: string | null }> {
    const db = await this.get(actor, id);
    requireStatus(db.status, 'credentials');
    return { ca_certificate: db.caCert ? Buffer.from(db.caCert, 'utf8').toString('base64') : null };
  }

  async patch(actor: Actor, id: number): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      requireStatus(db.status, 'patch');
      // A patch moves the nodes to what the catalogue names now for the same engine version.
      const engine = this.d.engines.get(db.engineId);
      const build = engine && (engine.image !== db.image || engine.binary !== db.binary) ? { image: engine.image, binary: engine.binary, generation: db.generation + 1 } : {};
      // Spread over hosts, a patch is one more rolling change, which the control plane leads (rollout.ts).
      if (await patchAcrossHosts(this.d, db, databaseRef(db), build, actor.user.username, this.d.clock.now())) return;
      await this.d.repo.update(id, { status: 'updating', updated: this.now(), ...build });
      await this.operation(actor, db, 'patch', {}, 'database_update', 'Patch requested');
    });
    this.d.onChange();
  }

  /**
   * Points every database at what the catalogue names now for its engine id. The agent applies
   * a changed image/binary as a patch inside the maintenance window. Returns whether any changed.
   */
  async retargetEngines(): Promise<boolean> {
    return this.d.repo.transaction(async () => {
      let changed = false;
      for (const db of await this.live()) {
        const e = this.d.engines.get(db.engineId);
        if (!e || (e.image === db.image && e.binary === db.binary)) continue;
        await this.d.repo.update(db.id, { image: e.image, binary: e.binary, generation: db.generation + 1 });
        changed = true;
      }
      return changed;
    });
  }

  async suspend(actor: Actor, id: number): Promise<void> {
    await this.runState(actor, id, 'suspend', 'suspended', 'suspending', 'database_suspend');
  }

  async resume(actor: Actor, id: number): Promise<void> {
    await this.runState(actor, id, 'resume', 'running', 'resuming', 'database_resume');
  }

  private async runState(actor: Actor, id: number, rule: 'suspend' | 'resume', state: 'running' | 'suspended', status: 'suspending' | 'resuming', action: string): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      requireStatus(db.status, rule);
      if (rule === 'suspend') await refuseSuspendWhileMoving(this.d.repo, id);
      const event = await this.d.events.record(action, databaseRef(db), { username: actor.user.username });
      await this.d.repo.update(db.id, { runState: state, status, generation: db.generation + 1, pendingEventId: event.id, updated: this.now() });
    });
    this.d.onChange();
  }

  async backups(actor: Actor, id: number): Promise<BackupRecord[]> {
    const db = await this.get(actor, id);
    requireStatus(db.status, 'backups');
    return (await this.d.repo.backups(id)).filter((b) => b.status === 'ready');
  }

  async backup(actor: Actor, id: number, backupId: number): Promise<BackupRecord> {
    const db = await this.get(actor, id);
    requireStatus(db.status, 'backups');
    const b = await this.d.repo.backup(id, backupId);
    if (!b || b.status !== 'ready') throw FulcrumError.notFound();
    return b;
  }

  async snapshot(actor: Actor, id: number, body: Body): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      requireStatus(db.status, 'snapshot');
      const pending = (await this.d.repo.pendingOperations(id)).filter((o) => o.kind === 'snapshot');
      const existing = (await this.d.repo.backups(id)).filter((b) => b.status === 'ready');
      const input = validateSnapshot(body, {
        clusterSize: db.clusterSize,
        labelTaken: (l) => existing.some((b) => b.label === l) || pending.some((o) => o.payload.label === l),
      });
      const snapshots = existing.filter((b) => b.type === 'snapshot').length + pending.length;
      if (snapshots >= MAX_SNAPSHOTS) {
        throw FulcrumError.conflict(`This database already has ${MAX_SNAPSHOTS} snapshots, the most it may keep; delete one first.`);
      }
      await this.d.repo.update(id, { status: 'backing_up', updated: this.now() });
      await this.operation(actor, db, 'snapshot', { label: input.label, target: input.target }, 'database_backup_create', `Snapshot ${input.label}`);
    });
    this.d.onChange();
  }

  async deleteBackup(actor: Actor, id: number, backupId: number): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      requireStatus(db.status, 'deleteBackup');
      const b = await this.d.repo.backup(id, backupId);
      if (!b || b.status !== 'ready') throw FulcrumError.notFound();
      // Hidden (and no longer counted) at once; the agent removes the files.
      await this.d.repo.setBackupStatus(id, backupId, 'deleting');
      await this.operation(actor, db, 'deleteBackup', { backup_id: backupId }, 'database_backup_delete', `Backup ${b.label}`);
    });
    this.d.onChange();
  }

  async restore(actor: Actor, id: number, backupId: number): Promise<void> {
    await this.d.repo.transaction(async () => {
      const db = await this.get(actor, id, 'read_write');
      const b = await this.d.repo.backup(id, backupId);
      if (!b || b.status !== 'ready') throw FulcrumError.notFound();
      requireStatus(db.status, 'restore');
      await this.d.repo.update(id, { status: 'restoring', updated: this.now() });
      await this.operation(actor, db, 'restore', { backup_id: backupId }, 'database_backup_restore', `Restore of backup ${b.label}`);
    });
    this.d.onChange();
  }

  private async operation(actor: Actor, db: DatabaseRecord, kind: OperationKind, payload: Record<string, unknown>, action: string, message?: string): Promise<void> {
    const event = await this.d.events.record(action, databaseRef(db), { username: actor.user.username, message: message ?? null });
    await this.d.repo.createOperation({ id: randomUUID(), databaseId: db.id, kind, payload, eventId: event.id, state: 'pending', error: null, created: this.d.clock.now() });
  }
}
