import { describe, expect, it } from 'vitest';
import { autoBackupsToPrune, autoLabel, dueAutoBackup, utcDay } from '../../../agent/backup/schedule.js';
import { isInWindow, nextWindowStart, type UpdatesWindow } from '../../../lib/maintenance-window.js';

const at = (s: string) => Date.parse(`${s}Z`);

describe('auto backup schedule', () => {
  it('is due from 00:00 UTC until taken, once per day', () => {
    expect(dueAutoBackup(at('2026-03-02T00:00:00'), '2026-03-01')).toBe('2026-03-02');
    expect(dueAutoBackup(at('2026-03-01T23:59:59'), '2026-03-01')).toBeUndefined();
    expect(dueAutoBackup(at('2026-03-02T13:00:00'), '2026-03-02')).toBeUndefined();
  });
  it('catches up a run missed while the agent was down', () => {
    expect(dueAutoBackup(at('2026-03-05T07:30:00'), '2026-03-01')).toBe('2026-03-05');
    expect(dueAutoBackup(at('2026-03-05T07:30:00'), undefined)).toBe('2026-03-05');
  });
  it('keeps the newest 7 auto backups and never prunes snapshots', () => {
    const list = Array.from({ length: 10 }, (_, i) => ({ id: i + 1, type: 'auto', createdMs: at(`2026-03-${String(i + 1).padStart(2, '0')}T00:00:00`) }));
    list.push({ id: 99, type: 'snapshot', createdMs: 0 });
    expect(autoBackupsToPrune(list).map((b) => b.id).sort((a, b) => a - b)).toEqual([1, 2, 3]);
    expect(autoBackupsToPrune(list.slice(0, 5))).toEqual([]);
  });
  it('labels like the real service and knows the UTC day', () => {
    expect(autoLabel(at('2022-02-04T11:11:00'), 'XcCRmI')).toBe('Scheduled - 02/04/22 11:11 UTC-XcCRmI');
    expect(utcDay(at('2026-12-31T23:59:59'))).toBe('2026-12-31');
  });
});

describe('maintenance window', () => {
  const weekly: UpdatesWindow = { frequency: 'weekly', duration: 3, hourOfDay: 20, dayOfWeek: 7, weekOfMonth: 0 };
  it('weekly: Sunday 20:00 for 3 hours (2026-03-01 is a Sunday)', () => {
    expect(isInWindow(weekly, at('2026-03-01T19:59:59'))).toBe(false);
    expect(isInWindow(weekly, at('2026-03-01T20:00:00'))).toBe(true);
    expect(isInWindow(weekly, at('2026-03-01T22:59:59'))).toBe(true);
    expect(isInWindow(weekly, at('2026-03-01T23:00:00'))).toBe(false);
    expect(isInWindow(weekly, at('2026-03-02T20:30:00'))).toBe(false);
  });
  it('a window that crosses midnight and the week boundary', () => {
    const late = { ...weekly, hourOfDay: 23, duration: 2 };
    expect(isInWindow(late, at('2026-03-02T00:30:00'))).toBe(true);
    expect(isInWindow(late, at('2026-03-02T01:00:00'))).toBe(false);
  });
  it('monthly: the Nth weekday of the month', () => {
    const m: UpdatesWindow = { frequency: 'monthly', duration: 1, hourOfDay: 8, dayOfWeek: 3, weekOfMonth: 3 };
    // Wednesdays of March 2026: 4, 11, 18, 25 -> the third is the 18th.
    expect(isInWindow(m, at('2026-03-18T08:15:00'))).toBe(true);
    expect(isInWindow(m, at('2026-03-11T08:15:00'))).toBe(false);
    expect(isInWindow(m, at('2026-03-25T08:15:00'))).toBe(false);
    expect(nextWindowStart(m, at('2026-03-19T00:00:00'))).toBe(at('2026-04-15T08:00:00'));
  });
  it('next start, day_of_week unset means Sunday, duration clamped to 1-4 (the platform accepts 4 hours)', () => {
    expect(nextWindowStart(weekly, at('2026-03-02T00:00:00'))).toBe(at('2026-03-08T20:00:00'));
    expect(nextWindowStart({ ...weekly, dayOfWeek: 0 }, at('2026-03-02T00:00:00'))).toBe(at('2026-03-08T20:00:00'));
    expect(isInWindow({ ...weekly, duration: 9 }, at('2026-03-01T23:30:00'))).toBe(true);
    expect(isInWindow({ ...weekly, duration: 9 }, at('2026-03-02T00:30:00'))).toBe(false);
    expect(isInWindow({ ...weekly, duration: 3 }, at('2026-03-01T23:30:00'))).toBe(false);
    expect(isInWindow({ ...weekly, duration: 0 }, at('2026-03-01T20:30:00'))).toBe(true);
  });
});
