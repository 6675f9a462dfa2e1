import { randomUUID } from 'node:crypto';
import { wireTime } from '../../../lib/clock.js';
import { isInWindow, nextWindowStart, type UpdatesWindow } from '../../../lib/maintenance-window.js';
import type { EntityRef, EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import type { DatabaseRecord, MemberPlacement, OperationRecord } from './model.js';
import { refuseWhileDraining, spansAgents } from './placement.js';

/** A database's `updates` as the window functions read them. */
export function updatesWindow(u: DatabaseRecord['updates']): UpdatesWindow {
  return { frequency: u.frequency, duration: u.duration, hourOfDay: u.hour_of_day, dayOfWeek: u.day_of_week ?? 0, weekOfMonth: u.week_of_month ?? 0 };
}

/**
 * `updates.pending`: a new engine build the agent holds for the maintenance window, planned for
 * the window's next start. No deadline: nothing forces it before the window (docs/databases.md).
 */
export function pendingUpdates(db: Pick<DatabaseRecord, 'patchPending' | 'updates'>, now: number): { deadline: string | null; description: string; planned_for: string | null }[] {
  if (!db.patchPending) return [];
  const start = nextWindowStart(updatesWindow(db.updates), now);
  return [{ deadline: null, description: 'A new build of the database engine, applied with a rolling restart', planned_for: start === undefined ? null : wireTime(start) }];
}

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
  return isInWindow(updatesWindow(db.updates), now);
}

/**
 * POST .../patch of a database spread over hosts: refused (400) while a host holding a member
 * drains, as a PUT that restarts the members is; else `database_update` "Patch requested", status
 * `updating` until the rollout ends (it completes the event) and the database pointed at `build`.
 * Returns false, doing nothing, for a database on one host (its agent patches it, PatchOp).
 */
export async function patchAcrossHosts(
  d: { repo: DatabaseRepository; events: EventService }, db: DatabaseRecord, ref: EntityRef, build: Partial<DatabaseRecord>, username: string, now: number,
): Promise<boolean> {
  const members = await d.repo.members(db.id);
  if (!spansAgents(members)) return false;
  await refuseWhileDraining(d.repo, members);
  const event = await d.events.record('database_update', ref, { username, message: 'Patch requested' });
  await startPatchRollout(d.repo, db.id, now);
  await d.repo.update(db.id, { ...build, status: 'updating', pendingEventId: event.id, secondEventId: null, updated: Math.floor(now / 1000) * 1000 });
  return true;
}
