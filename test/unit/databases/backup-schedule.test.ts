import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { BackupScheduler, REANNOUNCE_MS, backupDue } from '../../../control-plane/domain/databases/backup-schedule.js';
import type { BackupSlot, DatabaseRecord } from '../../../control-plane/domain/databases/model.js';
import type { DatabaseRepository } from '../../../control-plane/domain/databases/repository.js';

const at = (s: string) => Date.parse(`${s}Z`);
const db = (id: number, over: Partial<DatabaseRecord> = {}) =>
  ({ id, deleting: false, provisioned: true, runState: 'running', created: at('2026-03-01T10:00:00'), ...over }) as DatabaseRecord;

/** The slot half of the repository, in memory (the real adapters are in the contract suite). */
function fakeRepo(dbs: DatabaseRecord[]) {
  const slots: BackupSlot[] = [];
  const claims: string[] = [];
  const repo = {
    list: async () => dbs,
    backupSlots: async () => slots.filter((s) => !slots.some((o) => o.databaseId === s.databaseId && o.slot > s.slot)),
    claimBackupSlot: async (databaseId: number, slot: string, claimed: number) => {
      claims.push(`${databaseId}:${slot}`);
      if (slots.some((s) => s.databaseId === databaseId && s.slot === slot)) return false;
      slots.push({ databaseId, slot, claimed, taken: null });
      return true;
    },
  } as unknown as DatabaseRepository;
  return { repo, slots, claims };
}

describe('auto backup schedule on the control plane', () => {
  it('is due for running, provisioned databases created on an earlier day', () => {
    expect(backupDue(db(1), '2026-03-02')).toBe(true);
    expect(backupDue(db(1), '2026-03-01')).toBe(false);
    expect(backupDue(db(1, { provisioned: false }), '2026-03-02')).toBe(false);
    expect(backupDue(db(1, { runState: 'suspended' }), '2026-03-02')).toBe(false);
    expect(backupDue(db(1, { deleting: true }), '2026-03-02')).toBe(false);
  });

  it('claims each due day once, announces it, and announces an untaken day again only after a minute', async () => {
    const clock = new ManualClock(at('2026-03-01T23:59:00'));
    const { repo, slots, claims } = fakeRepo([db(1), db(2, { created: at('2026-03-02T00:00:01') })]);
    const s = new BackupScheduler({ repo, clock, logger: silentLogger() });
    expect(await s.tick()).toBe(false);
    clock.set(at('2026-03-02T00:00:05'));
    expect(await s.tick()).toBe(true);
    expect(slots.map((x) => [x.databaseId, x.slot])).toEqual([[1, '2026-03-02']]);
    // Claimed and untaken: no new claim, and quiet until a minute has passed.
    expect(await s.tick()).toBe(false);
    clock.advance(REANNOUNCE_MS);
    expect(await s.tick()).toBe(true);
    slots[0]!.taken = clock.now();
    clock.advance(REANNOUNCE_MS);
    expect(await s.tick()).toBe(false);
    expect(claims).toEqual(['1:2026-03-02']);
  });

  it('a new lease holder announces a day another replica claimed and nobody took', async () => {
    const clock = new ManualClock(at('2026-03-02T00:00:05'));
    const { repo, slots } = fakeRepo([db(1)]);
    slots.push({ databaseId: 1, slot: '2026-03-02', claimed: clock.now() - 1000, taken: null });
    const s = new BackupScheduler({ repo, clock, logger: silentLogger() });
    expect(await s.tick()).toBe(true);
    expect(slots).toHaveLength(1);
  });
});
