import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import type { DatabaseRecord } from './model.js';
import { databaseRef, type DatabaseService } from './database-service.js';
import { nextStatus, settle, type Observation } from './status-rules.js';
import { clusterIncomplete, hostState } from './host-healing.js';
import { spansAgents } from './placement.js';
import { IgnoredReports, reportScope } from './report-scope.js';
import { fencePosition } from './switchover.js';
import type { ActivationGate } from './activation-gate.js';

/** Actions only the control plane records (it starts that work and completes its event). */
const controlPlaneActions = new Set(['database_create', 'database_delete', 'database_credentials_reset', 'database_backup_restore', 'database_backup_delete']);
/**
 * A held observation is replayed (when a data plane answers) only this long after its report:
 * an older one may no longer be what the agent sees, and its next heartbeat decides instead.
 */
const HELD_FRESH_MS = 10_000;
/** Most observations held for replay (one per database waiting for its routes). */
const HELD_MAX = 10_000;

/** Actions the agent may start on its own (auto backups, window patches, rebuilds). */
const agentOrOwnActions = new Set(['database_backup_create', 'database_update']);

/** What an agent says about one database (transport-neutral view of ObservedDatabase). */
export interface ObservedDatabaseView extends Observation {
  id: number;
  backups: { id: number; label: string; type: string; createdMs: number; sizeBytes: number; status: string; target: string }[];
  events: { id: string; action: string; message: string; atMs: number; status: string }[];
  /** Per-node detail: role primary|replica|down, state running|stopped|missing. */
  nodes?: { role: string; state: string }[];
}

/**
 * A 3-node cluster whose primary is down while a replica still runs is failing over, not
 * failed: the agent promotes the replica within seconds. Shown as degraded so that a routine
 * failover does not read (and notify) as a failed database.
 */
export function effectiveStatus(clusterSize: number, o: Pick<ObservedDatabaseView, 'status' | 'nodes'>): string {
  if (clusterSize === 3 && o.status === 'failed' && (o.nodes ?? []).some((n) => n.state === 'running' && n.role === 'replica')) return 'degraded';
  return o.status;
}

export interface OperationResultView {
  operationId: string;
  databaseId: number;
  ok: boolean;
  error: string;
  /** The agent's stable code for the failure (lib/errors.ts ErrorCode); empty from an agent that sends none. */
  errorCode?: string;
  backupId: number;
  /** A fence's answer: the fenced primary's GTID position. */
  position?: string;
}

/**
 * Applies agent reports to the stored databases: operation results first (they end snapshot,
 * restore, patch, credential and backup-delete work and complete their events), then each
 * observation through the state machine of status-rules.ts. Everything here is idempotent: an
 * agent repeats results and events until the control plane stops asking.
 * Says whether the desired state changed (so the caller pushes again) and whether what the data
 * planes serve changed (a status or the members, which the database endpoints are made of).
 */
export interface ReportOutcome {
  /** The agents' desired state changed: push to them again. */
  desired: boolean;
  /** A database's status or members changed: its endpoints on the data planes may differ. */
  served: boolean;
}

export class DatabaseObserver {
  private readonly ignored: IgnoredReports;
  /**
   * Databases whose agent reported them ready while the data planes had not applied their
   * routes: the last observation, replayed by `recheck` when a data plane answers.
   */
  private readonly held = new Map<number, { agentId: string; view: ObservedDatabaseView; atMs: number }>();

  constructor(
    private readonly d: {
      repo: DatabaseRepository; events: EventService; service: DatabaseService; clock: Clock; logger: Logger;
      /** Says when a database may read `active` (activation-gate.ts); without it, at once. */
      gate?: ActivationGate;
    },
  ) {
    this.ignored = new IgnoredReports(d.logger.child({ component: 'database-observer' }));
  }

  private now(): number {
    return Math.floor(this.d.clock.now() / 1000) * 1000;
  }

  apply(agentId: string, databases: ObservedDatabaseView[], results: OperationResultView[]): Promise<ReportOutcome> {
    return this.d.repo.transaction(async () => {
      let changed = false;
      // Set by result() and observe() when a patch touches what the endpoints are made of.
      const served = { changed: false };
      const observed = new Map(databases.map((o) => [o.id, o]));
      for (const r of results) changed = (await this.result(agentId, r, observed, served)) || changed;
      for (const o of databases) changed = (await this.observe(agentId, o, served)) || changed;
      // A deleted database this agent no longer reports is gone: release what it held.
      for (const db of await this.d.repo.list()) {
        if (db.deleting && db.agentId === agentId && !observed.has(db.id)) {
          await this.d.service.purge(db.id);
          changed = true;
        }
      }
      return { desired: changed, served: served.changed };
    });
  }

  /**
   * Replays the observations held for want of applied routes (a data plane answered, so they
   * may be applied now), as their agents' next reports would; older ones wait for those reports.
   */
  recheck(): Promise<ReportOutcome> {
    return this.d.repo.transaction(async () => {
      const served = { changed: false };
      let changed = false;
      for (const [id, h] of [...this.held]) {
        if (this.d.clock.now() - h.atMs > HELD_FRESH_MS) {
          this.held.delete(id);
          continue;
        }
        changed = (await this.observe(h.agentId, h.view, served)) || changed;
      }
      return { desired: changed, served: served.changed };
    });
  }

  /** Whether `db` may go from another status to `active` now (its routes applied). */
  private mayActivate(db: DatabaseRecord, members: Record<string, string>): Promise<boolean> {
    return this.d.gate?.mayActivate({ ...db, members }) ?? Promise.resolve(true);
  }

  private async result(agentId: string, r: OperationResultView, observed: Map<number, ObservedDatabaseView>, served: { changed: boolean }): Promise<boolean> {
    const op = await this.d.repo.operation(r.operationId);
    if (!op || op.state !== 'pending') return false;
    // The operation's own database decides, not the id the result names: only an agent holding
    // it ends its work (docs/databases.md, "Whose report counts").
    const scope = await reportScope(this.d.repo, agentId, op.databaseId);
    if (scope !== 'held') {
      this.ignored.note(agentId, op.databaseId, 'operation_results', scope);
      return false;
    }
    // An operation addressed to one agent (a switchover's fence or catch-up) ends only by that
    // agent's word: another member's agent must not answer for the primary it does not run.
    if (typeof op.payload.agent === 'string' && op.payload.agent !== agentId) {
      this.ignored.note(agentId, op.databaseId, 'operation_results', 'foreign');
      return false;
    }
    const obs = observed.get(op.databaseId);
    const db = await this.d.repo.get(op.databaseId);
    if (!r.ok) this.d.logger.info({ operation: op.id, kind: op.kind, database: op.databaseId, code: r.errorCode || 'internal', error: r.error }, 'agent reports the operation failed');
    // Only a well-formed position is kept (the switchover sends it on to the target's agent).
    await this.d.repo.finishOperation(op.id, r.ok ? 'done' : 'failed', r.ok ? null : r.error || 'failed', r.ok ? fencePosition(r.position) : null);
    if (op.eventId) await this.d.events.complete(op.eventId, r.ok ? 'finished' : 'failed', r.ok ? undefined : r.error || 'The operation failed');
    if (!db) return true;
    const patch: Partial<DatabaseRecord> = {};
    switch (op.kind) {
      case 'snapshot':
      case 'restore':
      case 'patch':
        if (['backing_up', 'restoring', 'updating'].includes(db.status)) {
          const next = settle(obs?.status);
          // Active only once the data planes route to it; until then its next report settles it.
          // A restore's end opens its routes either way: a data-plane round must follow.
          if (next !== 'active' || await this.mayActivate(db, db.members)) patch.status = next;
          else served.changed = true;
        }
        break;
      case 'resetCredentials':
        if (r.ok && db.nextPassword) Object.assign(patch, { rootPassword: db.nextPassword, nextPassword: null });
        // A failed reset keeps the old password: desire it again.
        else Object.assign(patch, { nextPassword: null, generation: db.generation + 1 });
        break;
      case 'deleteBackup': {
        const backupId = Number(op.payload.backup_id);
        if (r.ok) await this.d.repo.deleteBackup(db.id, backupId);
        else await this.d.repo.setBackupStatus(db.id, backupId, 'ready');
        break;
      }
    }
    if (Object.keys(patch).length > 0) await this.d.repo.update(db.id, { ...patch, updated: this.now() });
    if (patch.status !== undefined && patch.status !== db.status) served.changed = true;
    return true;
  }

  private async observe(agentId: string, o: ObservedDatabaseView, served: { changed: boolean }): Promise<boolean> {
    let db = await this.d.repo.get(o.id);
    if (!db || db.deleting) return false;
    let changed = false;
    const placements = await this.d.repo.members(db.id);
    const member = placements.some((m) => m.agentId === agentId);
    if (db.agentId === null) {
      // Only placement names a database's agents: a report about an unplaced database is no claim
      // on it (docs/databases.md, "Whose report counts").
      if (!member) {
        this.ignored.note(agentId, db.id, 'databases', 'foreign');
        return false;
      }
      db = await this.d.repo.update(db.id, { agentId });
      changed = true;
    } else if (db.agentId !== agentId) {
      // Another member agent of a spread cluster speaks for its own members only: its events
      // (an errant transaction found on a returning member) count, its status does not.
      if (member) await this.recordEvents(agentId, db, o);
      else this.ignored.note(agentId, db.id, 'databases', 'foreign');
      return false;
    }

    const opPending = (await this.d.repo.pendingOperations(db.id)).some((op) => op.kind === 'snapshot' || op.kind === 'restore' || op.kind === 'patch' || op.kind === 'rollout');
    let status = effectiveStatus(db.clusterSize, o);
    let error = o.error;
    // A spread cluster missing a member (its host lost, the new one not reporting yet, or still
    // being seeded there) is not whole, whatever the primary's agent sees of its own members
    // (docs/multi-host.md, "A lost host").
    if (status === 'active' && db.provisioned && spansAgents(placements)) {
      const lost = new Set((await this.d.repo.agents()).filter((a) => hostState(a) === 'lost').map((a) => a.id));
      if (clusterIncomplete(placements, await this.d.repo.memberReports(db.id), lost)) {
        status = 'degraded';
        const seeding = placements.filter((m) => m.seed !== undefined).map((m) => m.member);
        if (!error && seeding.length > 0) error = `Member ${seeding.join(', ')} is being seeded on a new host: until it has caught up with the primary, the other members alone hold the data.`;
      }
    }
    let t = nextStatus(db, { ...o, status, error }, opPending);
    const patch: Partial<DatabaseRecord> = {};
    // A cluster spread over agents has its members assembled by the failover coordinator (one agent sees only its own).
    if (!spansAgents(placements) && JSON.stringify(o.members) !== JSON.stringify(db.members)) patch.members = o.members;
    // `active` means a client is served (docs/databases.md, "When a database is active"): the
    // status stays as it was until the data planes apply the routes it will have, and this
    // observation is kept to be replayed when one of them answers.
    const before = this.held.get(db.id);
    const fresh = before?.view === o ? before.atMs : this.d.clock.now();
    this.held.delete(db.id);
    if (t.status === 'active' && db.status !== 'active' && !(await this.mayActivate(db, patch.members ?? db.members))) {
      t = { status: db.status };
      this.held.set(db.id, { agentId, view: o, atMs: fresh });
      // A round records the routes' version (push/route-acks.ts) even when nothing else changed.
      served.changed = true;
      if (this.held.size > HELD_MAX) this.held.delete(this.held.keys().next().value!);
    }
    if (t.status !== db.status) {
      patch.status = t.status;
      patch.updated = this.now();
    }
    if (t.complete && db.pendingEventId !== null) {
      await this.d.events.complete(db.pendingEventId, t.complete.outcome, t.complete.message);
      patch.pendingEventId = null;
    }
    if (t.complete && db.secondEventId !== null) {
      await this.d.events.complete(db.secondEventId, t.complete.outcome, t.complete.message);
      patch.secondEventId = null;
    }
    if (t.notify) await this.d.events.record(t.notify.action, databaseRef(db), { message: t.notify.message ?? null });
    if (!db.provisioned && (t.status === 'active' || t.status === 'degraded')) {
      patch.provisioned = true;
      // The real service fills in a maintenance day once the database is up; ours is Sunday.
      if (db.updates.day_of_week === null) patch.updates = { ...db.updates, day_of_week: 7 };
    }
    if (o.caCertPem && o.caCertPem !== db.caCert) patch.caCert = o.caCertPem;
    if (o.usedDiskMb !== db.usedDiskMb && (o.usedDiskMb > 0 || db.usedDiskMb !== null)) patch.usedDiskMb = o.usedDiskMb;
    if (!!o.patchPending !== db.patchPending) patch.patchPending = !!o.patchPending;
    // 0 is an agent that has not finished its first archive round since it started: the stored
    // instant stays until it reports one (the archive outlives agent restarts).
    if ((o.oldestRestoreMs ?? 0) > 0 && o.oldestRestoreMs !== db.oldestRestoreMs) patch.oldestRestoreMs = o.oldestRestoreMs;
    // The control plane makes each new database's key; an agent reports one only when it holds
    // another, made before it was sent one (an older control plane, a database from before): its
    // objects are encrypted with that key, so it is adopted, kept sealed and sent from then on.
    // Only the database's reporting agent gets here. Never cleared by a report without it.
    if (o.backupKey && o.backupKey !== db.backupKey) patch.backupKey = o.backupKey;
    if (o.convergedGeneration !== db.convergedGeneration) patch.convergedGeneration = o.convergedGeneration;
    // A database rebuilt from the object store after its host was lost is back once its new agent
    // reports it active (docs/multi-host.md, "A 1-node database on a lost host"); the agent's own
    // event says to which instant.
    const recovered = db.recovery?.placedMs !== undefined && t.status === 'active';
    if (recovered) patch.recovery = null;
    const lastError = o.error || null;
    if (lastError !== db.lastError) patch.lastError = lastError;
    if (Object.keys(patch).length > 0) await this.d.repo.update(db.id, patch);
    if (patch.status !== undefined || patch.members !== undefined) served.changed = true;

    await this.d.repo.syncBackups(db.id, o.backups.filter((b) => b.status === 'ready').map((b) => ({
      id: b.id, label: b.label, type: b.type === 'auto' ? 'auto' : 'snapshot', target: b.target || 'primary', created: b.createdMs, sizeBytes: b.sizeBytes,
    })));
    await this.recordEvents(agentId, db, o);
    if (recovered) {
      const r = db.recovery!;
      const message = r.planned
        ? `Moved to agent ${agentId} (its host, agent ${r.from}, is draining): rebuilt from the object store up to its fence and active again ${Math.round((this.now() - r.lostMs) / 1000)} s after writes were refused, with the same id, credentials and hosts.`
        : `Recovered on agent ${agentId} from the object store ${Math.round((this.now() - r.lostMs) / 1000)} s after its host (agent ${r.from}) was declared lost: active again with the same id, credentials and hosts.`;
      await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [agentId, r.from] });
    }
    return changed || patch.status !== undefined;
  }

  private async recordEvents(agentId: string, db: DatabaseRecord, o: ObservedDatabaseView): Promise<void> {
    const busy = db.pendingEventId !== null || (await this.d.repo.pendingOperations(db.id)).length > 0;
    for (const e of o.events) {
      if (!e.id || !(await this.d.repo.markAgentEvent(`${agentId}:${db.id}:${e.id}`, db.id, e.atMs || this.d.clock.now()))) continue;
      // Work the API started has its own event, completed by status or operation result; an agent
      // echo of it would read as a second create/restore to clients that poll by action.
      if (controlPlaneActions.has(e.action) || (busy && agentOrOwnActions.has(e.action))) continue;
      const status = e.status === 'finished' || e.status === 'failed' ? e.status : 'notification';
      await this.d.events.record(e.action || 'database_update', databaseRef(db), { status, message: e.message || null });
    }
  }
}
