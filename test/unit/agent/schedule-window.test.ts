import { describe, expect, it } from 'vitest';
import { FALLBACK_AFTER_MS, autoBackupsToPrune, autoLabel, dueAutoBackup, dueAutoBackupDay, utcDay } from '../../../agent/backup/schedule.js';
import { isUtcDay } from '../../../lib/utc-day.js';
import { isInWindow, nextWindowStart, type UpdatesWindow } from '../../../lib/maintenance-window.js';

const at = (s: string) => Date.parse(`${s}Z`);

describe('auto backup schedule', () => {
  it('with a scheduling control plane: takes the day it asks for once, never an earlier one, and nothing on its own while connected', () => {
    const base = { nowMs: at('2026-03-02T00:00:05'), lastDay: '2026-03-01', scheduled: true, requestedDay: '2026-03-02', disconnectedSinceMs: undefined };
    expect(dueAutoBackupDay(base)).toBe('2026-03-02');
    expect(dueAutoBackupDay({ ...base, lastDay: '2026-03-02' })).toBeUndefined();
    expect(dueAutoBackupDay({ ...base, requestedDay: '2026-02-28' })).toBeUndefined();
    expect(dueAutoBackupDay({ ...base, lastDay: undefined })).toBe('2026-03-02');
    // Its own clock says a new day, but the control plane has not asked: nothing.
    expect(dueAutoBackupDay({ ...base, requestedDay: '' })).toBeUndefined();
    // A malformed day from a peer is ignored.
    expect(dueAutoBackupDay({ ...base, requestedDay: '2026-13-40' })).toBeUndefined();
    expect(dueAutoBackupDay({ ...base, requestedDay: '9999-99-99; rm' })).toBeUndefined();
  });
  it('without any control plane for 6 hours, or with one that does not schedule, keeps its own schedule over the same days', () => {
    const now = at('2026-03-02T06:00:00');
    const base = { nowMs: now, lastDay: '2026-03-01', scheduled: true, requestedDay: '2026-03-01' };
    expect(dueAutoBackupDay({ ...base, disconnectedSinceMs: now - FALLBACK_AFTER_MS + 1 })).toBeUndefined();
    expect(dueAutoBackupDay({ ...base, disconnectedSinceMs: now - FALLBACK_AFTER_MS })).toBe('2026-03-02');
    // Taken on its own: the control plane's later request of the same day is not taken again.
    expect(dueAutoBackupDay({ ...base, lastDay: '2026-03-02', requestedDay: '2026-03-02', disconnectedSinceMs: undefined })).toBeUndefined();
    expect(dueAutoBackupDay({ ...base, scheduled: false, requestedDay: '', disconnectedSinceMs: undefined })).toBe('2026-03-02');
  });
  it('checks days as utcDay writes them', () => {
    expect(isUtcDay('2026-03-02')).toBe(true);
    expect(isUtcDay(utcDay(at('2024-02-29T12:00:00')))).toBe(true);
    for (const bad of ['2026-02-30', '2026-3-2', '', ' 2026-03-02', '2026-03-02T00:00:00']) expect(isUtcDay(bad)).toBe(false);
  });
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
