import type { DatabaseRecord } from './model.js';

/**
 * How long after a resume the failover coordinator leaves a spread cluster's primary to its
 * agent: every member was stopped on purpose and each agent starts its own at about the same
 * time, so a primary that is not running yet is not lost (a replica started a second earlier must
 * not take over). Past it, a primary that still does not run is lost as usual and the most
 * advanced member is promoted (docs/multi-host.md, "Patch, suspend and resume across hosts").
 */
export const RESUME_GRACE_MS = 60_000;

/** Whether `db` was resumed less than RESUME_GRACE_MS ago and is still starting (status `resuming`). */
export function resumeGrace(db: Pick<DatabaseRecord, 'status' | 'updated'>, now: number): boolean {
  return db.status === 'resuming' && now - db.updated < RESUME_GRACE_MS;
}
