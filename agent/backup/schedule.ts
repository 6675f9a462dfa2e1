/**
 * Auto backups (docs/agent.md §6): daily at 00:00 UTC, the newest 7 kept. Pure
 * functions of the clock; node-cron and the reconcile loop only call them.
 */

import { isUtcDay, utcDay } from '../../lib/utc-day.js';

export { utcDay };

/** How long the agent goes without a control-plane stream before it takes auto backups itself. */
export const FALLBACK_AFTER_MS = 6 * 3_600_000;

/**
 * The day whose auto backup is due now, or undefined. Today's backup is due from 00:00 UTC
 * until it is taken; one missed while the agent was down is caught up when it runs again
 * (only today's: a backup taken late cannot be dated in the past).
 */
export function dueAutoBackup(nowMs: number, lastDay: string | undefined): string | undefined {
  const today = utcDay(nowMs);
  return lastDay === undefined || lastDay < today ? today : undefined;
}

/** What decides a database's auto backup on the agent. */
export interface AutoBackupFacts {
  nowMs: number;
  /** The last day taken (or settled), from the database's state file. */
  lastDay: string | undefined;
  /** The control plane decides the days (DesiredDatabase.backups_scheduled). */
  scheduled: boolean;
  /** The newest day the control plane asks for ('' = none). */
  requestedDay: string;
  /** Since when no control-plane stream has been held (undefined = held now). */
  disconnectedSinceMs: number | undefined;
}

/**
 * The day whose auto backup the agent takes now, or undefined (docs/agent.md §6). With a
 * control plane that schedules, the day it asks for, once; after FALLBACK_AFTER_MS without any
 * control plane, the agent's own daily schedule, which counts the same days, so a day taken by
 * either is never taken again by the other. With an older control plane, the own schedule.
 */
export function dueAutoBackupDay(f: AutoBackupFacts): string | undefined {
  if (!f.scheduled) return dueAutoBackup(f.nowMs, f.lastDay);
  if (isUtcDay(f.requestedDay) && (f.lastDay === undefined || f.requestedDay > f.lastDay)) return f.requestedDay;
  if (f.disconnectedSinceMs !== undefined && f.nowMs - f.disconnectedSinceMs >= FALLBACK_AFTER_MS) return dueAutoBackup(f.nowMs, f.lastDay);
  return undefined;
}

/** Auto backups beyond the newest `keep`, to delete. */
export function autoBackupsToPrune<T extends { type: string; createdMs: number; id: number }>(backups: T[], keep = 7): T[] {
  const autos = backups.filter((b) => b.type === 'auto').sort((a, b) => b.createdMs - a.createdMs || b.id - a.id);
  return autos.slice(keep);
}

/** `Scheduled - 02/04/22 11:11 UTC-XcCRmI`, the shape real auto backups are labelled with. */
export function autoLabel(ms: number, suffix: string): string {
  const d = new Date(ms);
  const p = (n: number) => String(n).padStart(2, '0');
  return `Scheduled - ${p(d.getUTCMonth() + 1)}/${p(d.getUTCDate())}/${p(d.getUTCFullYear() % 100)} ${p(d.getUTCHours())}:${p(d.getUTCMinutes())} UTC-${suffix}`;
}
