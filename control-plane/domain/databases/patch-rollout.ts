import { randomUUID } from 'node:crypto';
import { isInWindow } from '../../../lib/maintenance-window.js';
import type { DatabaseRepository } from './repository.js';
import type { DatabaseRecord, MemberPlacement, OperationRecord } from './model.js';
import { spansAgents } from './placement.js';

/**
 * A patch of a cluster spread over hosts (docs/multi-host.md, "Patch, suspend and resume across
 * hosts") is a rolling change like a resize: the same `rollout` operation, marked `patch` so that
 * each member is restarted on the catalogue's build even when its spec did not change.
 */
export async function startPatchRollout(repo: DatabaseRepository, databaseId: number, now: number): Promise<void> {
  await repo.createOperation({ id: randomUUID(), databaseId, kind: 'rollout', payload: { patch: true }, eventId: null, state: 'pending', error: null, created: now });
}

/**
 * Whether the maintenance window's automatic patch of a spread cluster is due now, pure: a new
 * build is waiting (its primary's agent says so, `patchPending`), the window is open, and the
 * database is active and running with no rolling change under way. On one host the agent decides
 * this itself (agent/database/plan.ts); across hosts no agent sees the whole cluster.
 */
export function windowPatchDue(
  db: Pick<DatabaseRecord, 'deleting' | 'provisioned' | 'runState' | 'status' | 'patchPending' | 'updates'>,
  placements: readonly MemberPlacement[], pending: readonly OperationRecord[], now: number,
): boolean {
  if (db.deleting || !db.provisioned || db.runState !== 'running' || db.status !== 'active' || !db.patchPending) return false;
  if (!spansAgents(placements) || pending.some((op) => op.kind === 'rollout')) return false;
  const u = db.updates;
  return isInWindow({ frequency: u.frequency, duration: u.duration, hourOfDay: u.hour_of_day, dayOfWeek: u.day_of_week ?? 0, weekOfMonth: u.week_of_month ?? 0 }, now);
}
