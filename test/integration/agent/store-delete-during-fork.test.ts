// integration-lane: concurrent (agent-fixture slot 36: its own 127.76/78/79.36 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Deletes that race a fork reading the local backup store (docs/agent.md, "Backup store", read
 * leases): a customer's delete of the very backup a fork is loading, and the delete of the fork's
 * source on the same agent. The fork is held in the middle of its read: the store's reader of the
 * source's objects is gated (its first file opens only when the test says so), so each delete
 * lands while the fork has planned from the objects and not read them yet. The backup is gone
 * from the agent's report at once; its data, or the deleted source's folder, stays until the fork
 * has ended with exactly the rows before the chosen second, and is purged afterwards. Process
 * runtime, real mariadbd; the source is `encrypted`, so its bases are dumps and a fork loads the
 * customer's snapshot when it is the newest backup before the second.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { PassThrough } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createLocalBackupStorage, type BackupStorage } from '../../../agent/backup/backup-storage.js';
import { BASE_IDS } from '../../../agent/backup/backup-service.js';
import { createLocalSegmentStorage } from '../../../agent/binlog/segment-storage.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { until } from '../../helpers/lab.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation, type Driver } from './control-plane-driver.js';

const SOURCE = 91;
const CLIENT = '127.0.0.36';

describe('agent: deletes while a fork reads the local backup store wait for the fork (read lease)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let src: DesiredDatabase;
  const forks: DesiredDatabase[] = [];
  /** The chosen second: rows 1-10 were committed before it, rows 11-15 after. */
  let T = 0;
  /** The next file of `db` the store is asked to read waits for `release`; `hit` says which backup. */
  let gate: { db: number; hit: (backupId: number) => void; opened: Promise<void> } | undefined;

  const stateOf = (id: number) => JSON.parse(readFileSync(join(fx.stateDir, 'databases', String(id), 'state.json'), 'utf8'));
  const folderOf = (id: number, backup?: number) => join(fx.stateDir, 'backups', String(id), ...(backup === undefined ? [] : [String(backup)]));
  const connectTo = (d: DesiredDatabase) =>
    connectFrom({ source: CLIENT, host: d.hostPrimary!, port: 3306, user: 'linroot', password: d.rootPassword!, ca: driver.db(Number(d.id))!.caCertPem });

  /** Arms the gate on the source's reads: resolves with the backup read first, and the function opening it. */
  function holdNextRead(): { read: Promise<number>; release: () => void } {
    let release!: () => void;
    const opened = new Promise<void>((r) => (release = r));
    const read = new Promise<number>((hit) => (gate = { db: SOURCE, hit, opened }));
    return { read, release };
  }

  /** `p`, or a failure naming `what` once `ms` have passed. */
  async function within<T>(p: Promise<T>, ms: number, what: string): Promise<T> {
    let timer: NodeJS.Timeout | undefined;
    try {
      return await Promise.race([p, new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]);
    } finally {
      clearTimeout(timer);
    }
  }

  async function insert(ids: number[]): Promise<number> {
    const c = await connectTo(src);
    for (const id of ids) await c.query('INSERT INTO app.t VALUES (?)', [id]);
    await c.end();
    return Date.now();
  }

  /** A 1-node fork of the source to T, created beside the databases already there. */
  async function fork(id: number, k: number): Promise<DesiredDatabase> {
    const f = desiredDb({
      id, engineId: src.engineId, version: src.version, rootPassword: `Fork.Pass_${id}`, hostPrimary: `${fx.net}.${k}`, hostSecondary: `${fx.net}.${k + 1}`,
      allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T,
    });
    forks.push(f);
    return f;
  }

  /** The fork is active and holds exactly rows 1-10, built from `base`. */
  async function exactRows(f: DesiredDatabase, base: number): Promise<void> {
    await driver.waitFor(() => driver.db(Number(f.id))?.status === 'active', 240_000, `fork ${f.id} active`);
    const c = await connectTo(f);
    const [rows] = await c.query('SELECT id FROM app.t ORDER BY id');
    await c.end();
    expect((rows as { id: number }[]).map((r) => Number(r.id))).toEqual([1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    expect(stateOf(Number(f.id)).forkBase).toEqual({ backupId: base, kind: 'logical' });
  }

  beforeAll(async () => {
    fx = await createAgentFixture({
      id: 'agent-store-delete-fork',
      slot: 36,
      extra: () => {
        const local = createLocalBackupStorage(join(fx.stateDir, 'backups'));
        const backupStorage: BackupStorage = {
          ...local,
          reader: (db, id, file) => {
            const g = gate;
            if (!g || g.db !== db) return local.reader(db, id, file);
            gate = undefined;
            // The file is opened only once the test releases the read, after its delete.
            const out = new PassThrough();
            g.hit(id);
            void g.opened.then(() => pipeline(local.reader(db, id, file), out).catch((err: Error) => out.destroy(err)));
            return out;
          },
        };
        return { backupStorage, binlogArchiveMs: 2000 };
      },
    });
    ({ driver } = fx);
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    src = desiredDb({ id: SOURCE, engineId: engine!.id, version: engine!.version, encrypted: true, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([src]);
    await driver.waitFor(() => driver.db(SOURCE)?.status === 'active', 90_000, 'source active');
    const c = await connectTo(src);
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await c.end();
    // The archive's first round takes a (logical) base: from then on a fork can be built.
    await driver.waitFor(() => Number(driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 120_000, 'a restorable instant');
    await insert([1, 2, 3, 4, 5]);
    // The chain has begun at the hidden base (its first segment archived) before the snapshot is
    // taken: otherwise the archive would start at the snapshot, and once the snapshot is deleted
    // no chain would reach the second the last fork is asked for.
    const segments = createLocalSegmentStorage(join(fx.stateDir, 'backups'));
    await until('a first archived binlog segment', async () => (await segments.list(SOURCE)).length > 0, 60_000, 200);
  }, 240_000);

  afterAll(async () => {
    gate = undefined;
    await fx?.close();
  });

  it('a backup deleted while a fork loads it: gone from the list at once, the fork ends with exact rows, its data purged afterwards', async () => {
    const snap = await runOperation(driver, SOURCE, { snapshot: { label: 'before_fork', target: 'primary' } }, 90_000);
    expect(snap).toMatchObject({ ok: true });
    const last = await insert([6, 7, 8, 9, 10]);
    // T: the second after the last of those commits; rows 11-15 are committed once it has begun.
    T = (Math.floor(last / 1000) + 1) * 1000;
    await until('the chosen second begun', () => Date.now() > T + 100, 10_000);
    await insert([11, 12, 13, 14, 15]);

    const held = holdNextRead();
    const f = await fork(92, 3);
    driver.setDatabases([src, ...forks]);
    // The fork planned from the snapshot (the newest backup before T) and opens it now.
    expect(await within(held.read, 180_000, 'the fork\'s first read')).toBe(snap.backupId);
    expect(await runOperation(driver, SOURCE, { deleteBackup: { backupId: snap.backupId } }, 60_000)).toMatchObject({ ok: true });
    // Gone from the agent's list at once (the API hides it on the request already)...
    await driver.waitFor(() => driver.db(SOURCE) && !driver.db(SOURCE)!.backups.some((b) => Number(b.id) === snap.backupId), 30_000, 'snapshot gone from the report');
    // ...while its data waits for the fork: one data file, the manifest withdrawn.
    expect(existsSync(folderOf(SOURCE, snap.backupId)) ? readdirSync(folderOf(SOURCE, snap.backupId)) : []).toEqual([expect.stringMatching(/^dump\.sql\.zst/)]);
    held.release();
    await exactRows(f, snap.backupId);
    // The fork's lease ended: the snapshot's data is purged (nothing of it left in the store).
    await until('the deleted snapshot\'s data purged', () => !existsSync(folderOf(SOURCE, snap.backupId)), 90_000, 200);
    expect(existsSync(folderOf(SOURCE))).toBe(true);
  }, 600_000);

  it('the source deleted while a fork on the same agent reads it: its folder stays until the fork has ended with exact rows, then goes', async () => {
    expect(T).toBeGreaterThan(0);
    const held = holdNextRead();
    const f = await fork(93, 5);
    driver.setDatabases([src, ...forks]);
    // The snapshot is gone: the fork loads the chain's hidden base.
    const base = await within(held.read, 180_000, 'the fork\'s first read');
    expect(base).toBeGreaterThanOrEqual(BASE_IDS);
    driver.setDatabases([...forks], { deleted: [SOURCE] });
    await driver.waitFor(() => driver.last() && !driver.db(SOURCE), 90_000, 'source gone from the report');
    expect(existsSync(join(fx.stateDir, 'databases', String(SOURCE)))).toBe(false);
    // What the fork reads stays: the base's data and the archived binlog segments.
    expect(readdirSync(folderOf(SOURCE, base)).filter((n) => n.startsWith('dump.sql.zst'))).toHaveLength(1);
    expect(readdirSync(join(folderOf(SOURCE), 'binlog')).length).toBeGreaterThan(0);
    held.release();
    await exactRows(f, base);
    await until('the deleted source\'s folder purged', () => !existsSync(folderOf(SOURCE)), 90_000, 200);
  }, 600_000);
});
