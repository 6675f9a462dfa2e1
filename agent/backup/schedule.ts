/**
 * Auto backups (docs/agent.md §6): daily at 00:00 UTC, the newest 7 kept. Pure
 * functions of the clock; node-cron and the reconcile loop only call them.
 */

/** The UTC day (YYYY-MM-DD) an instant falls on. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/**
 * The day whose auto backup is due now, or undefined. Today's backup is due from 00:00 UTC
 * until it is taken; one missed while the agent was down is caught up when it runs again
 * (only today's: a backup taken late cannot be dated in the past).
 */
export function dueAutoBackup(nowMs: number, lastDay: string | undefined): string | undefined {
  const today = utcDay(nowMs);
  return lastDay === undefined || lastDay < today ? today : undefined;
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
