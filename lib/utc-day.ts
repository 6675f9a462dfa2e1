/**
 * Auto backups are counted in UTC days (docs/agent.md §6): the control plane names the day it
 * asks for and the agent remembers the last day it took, both as YYYY-MM-DD, so days compare as
 * strings.
 */

/** The UTC day (YYYY-MM-DD) an instant falls on. */
export function utcDay(ms: number): string {
  return new Date(ms).toISOString().slice(0, 10);
}

/** True for a well-formed day as utcDay writes it (a peer's value is checked before use). */
export function isUtcDay(s: string | undefined): s is string {
  return typeof s === 'string' && /^\d{4}-\d{2}-\d{2}$/.test(s) && utcDay(Date.parse(`${s}T00:00:00Z`) || 0) === s;
}
