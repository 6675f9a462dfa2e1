import { mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { createLocalReadLeases, deferredPurges, leased, LEASE_MS, LEASE_RENEW_MS, withReadLease } from '../../../agent/backup/read-lease.js';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';

describe('read leases on a database\'s stored objects', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('is held while the read runs, renewed, released at its end (also when it fails), and expires when nobody renews it', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-lease-'));
    const leases = createLocalReadLeases(dir);
    const clock = new ManualClock();
    let release!: () => void;
    const reading = withReadLease({ leases, clock, logger: silentLogger() }, 9, 'fork-12', () => new Promise<string>((r) => (release = () => r('done'))));
    await expect.poll(() => leased(leases, 9, clock.now())).toBe(true);
    // Renewed each interval: past the first lease's end, still held.
    for (let t = 0; t < LEASE_MS + LEASE_RENEW_MS; t += LEASE_RENEW_MS) {
      clock.advance(LEASE_RENEW_MS);
      await expect.poll(async () => (await leases.list(9))[0]?.untilMs).toBe(clock.now() + LEASE_MS);
    }
    expect(await leased(leases, 9, clock.now())).toBe(true);
    release();
    expect(await reading).toBe('done');
    expect(await leases.list(9)).toEqual([]);
    await expect(withReadLease({ leases, clock, logger: silentLogger() }, 9, 'fork-13', () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(await leases.list(9)).toEqual([]);
    // An agent that died holding one: nobody renews it, and it stops counting at its end.
    await leases.hold(9, 'fork-14', clock.now() + LEASE_MS);
    expect(await leased(leases, 9, clock.now() + LEASE_MS - 1)).toBe(true);
    expect(await leased(leases, 9, clock.now() + LEASE_MS)).toBe(false);
    await expect(leases.hold(9, '../x', 1)).rejects.toThrow(/bad lease holder/);
  });

  it('keeps the deferred purges across a restart, in a 0600 file', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-lease-'));
    const file = join(dir, 'store-purges.json');
    const p = deferredPurges(file);
    await p.add(5);
    await p.add(7);
    await p.add(5);
    expect(deferredPurges(file).ids()).toEqual([5, 7]);
    expect(statSync(file).mode & 0o777).toBe(0o600);
    await p.drop(5);
    expect(deferredPurges(file).ids()).toEqual([7]);
    // One backup of a database: recorded beside the databases, read back after a restart.
    await p.addBackup(9, 3);
    await p.addBackup(9, 3);
    await p.addBackup(9, 4);
    const again = deferredPurges(file);
    expect(again.ids()).toEqual([7]);
    expect(again.backups()).toEqual([{ database: 9, backup: 3 }, { database: 9, backup: 4 }]);
    await again.dropBackup(9, 3);
    expect(deferredPurges(file).backups()).toEqual([{ database: 9, backup: 4 }]);
    expect(deferredPurges(file).ids()).toEqual([7]);
  });

  it('reads a file written before backups were recorded (databases only), and skips what is not an id', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-lease-'));
    const file = join(dir, 'store-purges.json');
    writeFileSync(file, JSON.stringify([5, 7, 'x', -1, [2, 0], [2, 3, 4], [8]]));
    expect(deferredPurges(file).ids()).toEqual([5, 7]);
    expect(deferredPurges(file).backups()).toEqual([]);
  });
});
