/**
 * Maintenance windows (the `updates` field, docs/agent.md §7): weekly or monthly, starting at
 * hour_of_day UTC on day_of_week (1 = Monday ... 7 = Sunday), lasting `duration` hours; monthly
 * windows fall in week_of_month 1-4, the Nth occurrence of that weekday in the month (days
 * 1-7 are week 1). Pure functions of an instant, so they are tested with fixed dates.
 */
export interface UpdatesWindow {
  frequency: string;
  duration: number;
  hourOfDay: number;
  /** 0 = not set: Sunday, the documented default day. */
  dayOfWeek: number;
  /** 0 = null. */
  weekOfMonth: number;
}

const HOUR = 3_600_000;
const DAY = 24 * HOUR;

function startsOn(w: UpdatesWindow, dayStartMs: number): boolean {
  const d = new Date(dayStartMs);
  const iso = d.getUTCDay() === 0 ? 7 : d.getUTCDay();
  if (iso !== (w.dayOfWeek || 7)) return false;
  if (w.frequency === 'monthly') return Math.ceil(d.getUTCDate() / 7) === (w.weekOfMonth || 1);
  return true;
}

function duration(w: UpdatesWindow): number {
  return Math.min(Math.max(w.duration || 1, 1), 4) * HOUR;
}

/** True when `nowMs` is inside a window (which may have started the day before). */
export function isInWindow(w: UpdatesWindow, nowMs: number): boolean {
  const today = Math.floor(nowMs / DAY) * DAY;
  for (const day of [today, today - DAY]) {
    if (!startsOn(w, day)) continue;
    const start = day + (w.hourOfDay % 24) * HOUR;
    if (nowMs >= start && nowMs < start + duration(w)) return true;
  }
  return false;
}

/** The start of the next window at or after `nowMs` (within about two months). */
export function nextWindowStart(w: UpdatesWindow, nowMs: number): number | undefined {
  const today = Math.floor(nowMs / DAY) * DAY;
  for (let i = 0; i < 70; i++) {
    const day = today + i * DAY;
    const start = day + (w.hourOfDay % 24) * HOUR;
    if (start >= nowMs && startsOn(w, day)) return start;
  }
  return undefined;
}
