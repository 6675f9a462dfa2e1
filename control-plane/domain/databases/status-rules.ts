import { FulcrumError } from '../../../lib/errors.js';
import type { DatabaseRecord, DatabaseStatus } from './model.js';

/**
 * The database state machine as pure functions: which API operation each status allows, and how
 * an agent observation moves the stored (API) status. The control plane owns `status`; the agent
 * only says what it sees (docs/databases.md).
 */
export type GuardedOp =
  | 'update' | 'delete' | 'restore' | 'snapshot' | 'patch' | 'backups' | 'credentials'
  | 'resetCredentials' | 'suspend' | 'resume' | 'deleteBackup';

const allowed: Record<GuardedOp, DatabaseStatus[] | 'not_provisioning'> = {
  update: ['active'],
  delete: ['active', 'failed', 'degraded'],
  restore: ['active', 'degraded', 'failed'],
  snapshot: ['active'],
  patch: ['active'],
  backups: 'not_provisioning',
  credentials: 'not_provisioning',
  resetCredentials: ['active', 'degraded'],
  suspend: ['active', 'degraded'],
  resume: ['suspended'],
  deleteBackup: ['active', 'failed', 'degraded'],
};

const verbs: Record<GuardedOp, string> = {
  update: 'updated', delete: 'deleted', restore: 'restored', snapshot: 'backed up', patch: 'patched',
  backups: 'listed', credentials: 'read', resetCredentials: 'given new credentials', suspend: 'suspended',
  resume: 'resumed', deleteBackup: 'changed',
};

export const PROVISIONING_REASON = 'Your database is provisioning; please wait until provisioning is complete to perform this operation.';

/** Throws a 400 with a clear reason when `status` does not allow the operation. */
export function requireStatus(status: DatabaseStatus, op: GuardedOp): void {
  const rule = allowed[op];
  if (status === 'provisioning') throw FulcrumError.conflict(PROVISIONING_REASON);
  if (rule === 'not_provisioning' || rule.includes(status)) return;
  const list = rule.length === 1 ? rule[0] : `${rule.slice(0, -1).join(', ')} or ${rule[rule.length - 1]}`;
  throw FulcrumError.conflict(`Your database is ${status}; it can be ${verbs[op]} only when it is ${list}.`);
}

/** What the agent observes about one database (a domain view of ObservedDatabase). */
export interface Observation {
  status: string;
  members: Record<string, string>;
  caCertPem: string;
  error: string;
  usedDiskMb: number;
  convergedGeneration: number;
  /** A new engine build waits for the maintenance window (updates.pending). */
  patchPending?: boolean;
  /** The oldest restorable instant (ms); 0 = the agent does not know one (yet). */
  oldestRestoreMs?: number;
  /** The database's backup key when its objects go to a shared store ('' otherwise); a secret. */
  backupKey?: string;
}

export interface Transition {
  status: DatabaseStatus;
  /** Complete the database's pending event (create, update, suspend, resume). */
  complete?: { outcome: 'finished' | 'failed'; message?: string };
  /** A new notification event to record. */
  notify?: { action: string; message?: string };
}

const steady = new Set(['active', 'degraded', 'failed']);

/** The status an operation returns to once it is over, given what the agent last saw. */
export function settle(observed: string | undefined): DatabaseStatus {
  return observed && steady.has(observed) ? (observed as DatabaseStatus) : 'active';
}

/**
 * How one observation moves the stored status. `opPending` says whether a one-off operation
 * (snapshot, restore, patch) still holds the status; those end with their OperationResult.
 */
export function nextStatus(db: Pick<DatabaseRecord, 'status' | 'generation'>, obs: Observation, opPending: boolean): Transition {
  const o = obs.status;
  const converged = obs.convergedGeneration >= db.generation;
  const error = obs.error || undefined;
  switch (db.status) {
    case 'provisioning':
      // A failure counts only with a reason: right after bootstrap the agent may briefly see an
      // unhealthy node and say `failed` without one.
      if (o === 'failed' && error) return { status: 'failed', complete: { outcome: 'failed', message: error } };
      if (converged && (o === 'active' || o === 'degraded')) return { status: o, complete: { outcome: 'finished' } };
      return { status: 'provisioning' };
    case 'updating':
    case 'resizing':
      // A resize is an update that changes the nodes' limits: it ends the same way.
      if (opPending) return { status: db.status };
      if (o === 'failed') return { status: 'failed', complete: { outcome: 'failed', message: error ?? 'Update failed' } };
      if (converged && (o === 'active' || o === 'degraded')) return { status: o, complete: { outcome: 'finished' } };
      return { status: db.status };
    case 'backing_up':
    case 'restoring':
      return { status: opPending ? db.status : settle(o) };
    case 'suspending':
      if (converged && o === 'suspended') return { status: 'suspended', complete: { outcome: 'finished' } };
      return { status: 'suspending' };
    case 'suspended':
      return { status: 'suspended' };
    case 'resuming':
      if (converged && (o === 'active' || o === 'degraded')) return { status: o, complete: { outcome: 'finished' } };
      if (o === 'failed') return { status: 'failed', complete: { outcome: 'failed', message: error ?? 'Resume failed' } };
      return { status: 'resuming' };
    case 'active':
    case 'degraded':
    case 'failed': {
      // Work the agent starts on its own (a patch in the maintenance window) shows as updating.
      if (db.status === 'active' && o === 'updating') return { status: 'updating' };
      if (!steady.has(o) || o === db.status) return { status: db.status };
      const next = o as DatabaseStatus;
      if (next === 'degraded') return { status: next, notify: { action: 'database_degraded', message: error ?? 'A node of the cluster is down' } };
      if (next === 'failed') return { status: next, notify: { action: 'database_failed', message: error ?? 'The database cannot serve' } };
      return { status: next };
    }
    default:
      return { status: db.status };
  }
}
