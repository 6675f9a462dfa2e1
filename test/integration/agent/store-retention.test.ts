// integration-lane: concurrent (agent-fixture slot 32: its own 127.76/78/79.32 blocks, port 0, temp folders; startObjectStore on 127.83.32.1 with free ports).
/**
 * Retention deletes objects in a real S3-compatible store (Swift + s3api over TLS,
 * test/helpers/object-store.ts; docs/agent.md §6, "Backup store", "Retention and delete"): a
 * 1-node database whose control plane asks for nine days of auto backups keeps the newest seven
 * in the store; a fourth snapshot is refused and leaves no object; and with a short archive window
 * (binlog_retention_period) the hidden base and binlog segments no second inside the window needs
 * are deleted from the store, while every customer backup stays and oldest_restore_ms still names a
 * second the store can give back. Objects are counted by listing the store, and the bytes Swift
 * keeps on disk are counted too.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Agent as HttpsAgent } from 'node:https';
import { join } from 'node:path';
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';
import type { BackupManifest } from '../../../agent/backup/backup-storage.js';
import { openFields } from '../../../agent/backup/sealed-manifest.js';
import { gtidLe } from '../../../agent/binlog/chain.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { until } from '../../helpers/lab.js';

const ID = 71;
const PREFIX = 'region-r';
/** The archive window asked for: short, so the test sees it pass (the API's minimum is 600 s). */
const WINDOW_S = 8;
/** Hidden base backups take ids from here (agent/backup/backup-service.ts). */
const BASE_IDS = 1_000_000_000;

interface StoredManifest {
  id?: number; seq?: number; type?: string; label?: string; finishedMs?: number;
  /** A backup's snapshot position; a segment's GTID range. */
  snapshotGtid?: string; gtidStart?: string; gtidEnd?: string; closedMs?: number;
}

describe('agent: retention and the archive window delete objects in the object store', () => {
  let store: ObjectStore;
  let s3: S3Client;
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  /** The chain's first base and first segment, stored before any customer backup. */
  let firstBase: StoredManifest;
  let firstSegment: StoredManifest;
  /** The first customer backup: no second after it needs what was written before its snapshot. */
  let firstAuto: StoredManifest;
  /** The agent's log lines, kept to say what the archive rounds and backups did when a wait runs out. */
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
  /** The binlog archive's, its rounds' and the backups' lines, and every warning and error. */
  const agentLog = () => lines.map((l) => JSON.parse(l) as { level: number; component?: string })
    .filter((j) => j.component === 'binlog-archive' || j.component === 'day-two' || j.component === 'backups' || j.level >= 40)
    .map((j) => JSON.stringify(j)).join('\n');
  /** What the test's last wait saw. */
  let seen = '';
  const explainFailure = () => onTestFailed(() => console.log(`[last seen] ${seen}\n[agent: binlog archive, backups, warnings]\n${agentLog()}`));

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.32.1' });
    s3 = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new HttpsAgent({ ca: store.ca }) },
    });
    const backupStore = {
      ...parseStoreUrl(`s3://${store.bucket}/${PREFIX}`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
      credentials: loadStoreCredentials(store.credentialsFile),
    };
    fx = await createAgentFixture({ id: 'agent-store-retention', slot: 32, extra: () => ({ logger, binlogArchiveMs: 2000, backupStore }) });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({
      id: ID, engineId: engine!.id, version: engine!.version, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'],
      binlogRetentionSeconds: WINDOW_S, backupsScheduled: true, autoBackupDay: '',
    });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(ID)?.status === 'active', 90_000, 'active');
    // The member accepts the endpoint's PROXY header once the agent has set its networks.
    await (await until('the endpoint serves', () => connect(), 60_000, 500)).end();
  }, 180_000);

  afterAll(async () => {
    s3?.destroy();
    await fx?.close();
    await store?.stop();
  });

  const connect = () => connectFrom({ source: '127.0.0.32', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(ID)!.caCertPem });
  async function keys(kind: 'backups' | 'binlog'): Promise<string[]> {
    const out: string[] = [];
    let token: string | undefined;
    do {
      const r = await s3.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: `${PREFIX}/db/${ID}/${kind}/`, ContinuationToken: token }));
      out.push(...(r.Contents ?? []).map((x) => x.Key!));
      token = r.NextContinuationToken;
    } while (token);
    return out;
  }
  /** The manifests in the store (what exists for restores, forks and retention). */
  async function manifests(kind: 'backups' | 'binlog'): Promise<StoredManifest[]> {
    const out: StoredManifest[] = [];
    for (const k of (await keys(kind)).filter((x) => x.endsWith('/manifest.json'))) {
      // Retention may delete it between the listing and the read: then it is gone, not an error.
      const r = await s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: k })).catch((err: Error) => {
        if (err.name === 'NoSuchKey') return undefined;
        throw err;
      });
      if (!r) continue;
      const m = JSON.parse(await r.Body!.transformToString()) as BackupManifest;
      // A backup's label is sealed with the database's key (agent/backup/sealed-manifest.ts).
      out.push((m.sealed ? { ...m, ...openFields(JSON.parse(readFileSync(join(fx.stateDir, 'databases', String(ID), 'state.json'), 'utf8')).backupKey as string, m) } : m) as StoredManifest);
    }
    return out;
  }
  /** Data objects (not manifests) under one backup id or segment seq. */
  const dataObjects = async (kind: 'backups' | 'binlog', id: number) => (await keys(kind)).filter((k) => k.includes(`/${kind}/${id}/`) && !k.endsWith('/manifest.json'));
  /** The object files Swift keeps on its disk (one .data file per object). */
  const swiftFiles = () => (existsSync(store.devicesDir) ? readdirSync(store.devicesDir, { withFileTypes: true, recursive: true }) : [])
    .filter((e) => e.isFile() && e.name.endsWith('.data')).map((e) => join(e.parentPath, e.name));
  const autos = async () => (await manifests('backups')).filter((m) => m.type === 'auto');
  const snapshots = async () => (await manifests('backups')).filter((m) => m.type === 'snapshot');
  const events = () => driver.db(ID)?.events ?? [];

  it('nine days of auto backups leave the newest seven in the store; a fourth snapshot is refused and stores nothing', async () => {
    explainFailure();
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(32))');
    // The chain's first base and a segment after it are in the store before any customer backup
    // (a segment holds transactions after the base: rows go on being written until one is there).
    await until('a hidden base and a segment', async () => {
      await c.query("INSERT INTO app.t (v) VALUES ('before')");
      return (await manifests('backups')).some((m) => m.id! > BASE_IDS) && (await manifests('binlog')).length > 0 || undefined;
    }, 90_000, 500);
    await c.end();
    firstBase = (await manifests('backups')).filter((m) => m.id! > BASE_IDS).sort((a, b) => a.id! - b.id!)[0]!;
    firstSegment = (await manifests('binlog')).sort((a, b) => a.seq! - b.seq!)[0]!;

    const taken: number[] = [];
    for (let d = 1; d <= 9; d++) {
      const day = `2099-01-0${d}`;
      driver.setDatabases([{ ...db, autoBackupDay: day }]);
      await driver.waitFor(() => events().some((e) => e.message === `auto backup for ${day} taken`), 90_000, `the auto backup for ${day}`);
      const newest = (await autos()).sort((a, b) => b.id! - a.id!)[0]!;
      expect(taken).not.toContain(newest.id);
      taken.push(newest.id!);
      if (d === 1) firstAuto = newest;
    }
    // Nothing is written while the backups are taken: the first segment holds only transactions
    // the first auto backup already has.
    expect(gtidLe(firstSegment.gtidEnd!, firstAuto.snapshotGtid!)).toBe(true);
    const kept = (await autos()).map((m) => m.id!).sort((a, b) => a - b);
    expect(kept).toEqual(taken.slice(-7).sort((a, b) => a - b));
    // The two oldest days' objects are gone, data and manifest alike.
    for (const id of taken.slice(0, 2)) expect((await keys('backups')).filter((k) => k.includes(`/backups/${id}/`))).toEqual([]);
    for (const id of kept) expect(await dataObjects('backups', id)).toHaveLength(1);

    for (const label of ['snap_a', 'snap_b', 'snap_c']) {
      expect(await runOperation(driver, ID, { snapshot: { label, target: 'primary' } }, 90_000)).toMatchObject({ ok: true });
    }
    const fourth = await runOperation(driver, ID, { snapshot: { label: 'snap_d', target: 'primary' } }, 90_000);
    expect(fourth).toMatchObject({ ok: false, error: expect.stringContaining('already has 3 snapshot backups') });
    expect((await snapshots()).map((m) => m.label).sort()).toEqual(['snap_a', 'snap_b', 'snap_c']);
    expect((await manifests('backups')).some((m) => m.label === 'snap_d')).toBe(false);
  }, 240_000);

  it('the archive window deletes the hidden base and the segments no second inside it needs; customer backups stay', async () => {
    explainFailure();
    expect(firstBase?.finishedMs).toBeGreaterThan(0);
    // The first customer backup was taken after that base and segment: once it is older than
    // the window, neither is needed for any second inside it, nor is any segment ending at or
    // before its snapshot. Rows go on being written, so newer segments go on being archived.
    // Segments are told apart by what they hold. Retention may delete every segment (a loaded
    // run's first test outlasts the window long after its last write): the next one still gets
    // a new number, never one an object in the store had before.
    const c = await connect();
    await until('the first base and every segment the window no longer needs deleted from the store, newer segments there', async () => {
      await c.query("INSERT INTO app.t (v) VALUES ('window')");
      const segs = await manifests('binlog');
      const baseLeft = (await keys('backups')).filter((k) => k.includes(`/backups/${firstBase.id}/`));
      const unneeded = segs.filter((m) => gtidLe(m.gtidEnd!, firstAuto.snapshotGtid!));
      seen = `first base ${firstBase.id}: ${baseLeft.length} objects left; first segment ${firstSegment.seq} (${firstSegment.gtidStart}..${firstSegment.gtidEnd}); `
        + `first auto backup at ${firstAuto.snapshotGtid}; segments now ${segs.map((m) => `${m.seq} (${m.gtidStart}..${m.gtidEnd})`).join(', ') || 'none'}`;
      return baseLeft.length === 0 && segs.length > 0 && unneeded.length === 0 || undefined;
    }, 120_000, 500);
    await c.end();
    for (const m of await manifests('binlog')) expect(m.seq, `segment ${m.seq} (${m.gtidStart}..${m.gtidEnd}) after the deleted first one`).toBeGreaterThan(firstSegment.seq!);
    // Each segment left has its data object, in one listing (a round may delete segments
    // meanwhile, manifest first, as the window moves past a newer base).
    const listed = await keys('binlog');
    const segmentDirs = listed.filter((k) => k.endsWith('/manifest.json')).map((k) => k.slice(0, -'manifest.json'.length));
    expect(segmentDirs.length).toBeGreaterThan(0);
    for (const dir of segmentDirs) expect(listed.filter((k) => k.startsWith(dir) && !k.endsWith('/manifest.json'))).toHaveLength(1);
    // Customer backups are not the archive window's to delete.
    expect((await autos()).length).toBe(7);
    expect((await snapshots()).length).toBe(3);
    // What is left is what the listing says: Swift holds one file per object, no more (rounds go
    // on writing meanwhile, so the two are compared until they agree).
    await until('Swift\'s files agree with the listing', async () => {
      const listed = (await keys('backups')).length + (await keys('binlog')).length;
      seen = `Swift holds ${swiftFiles().length} object files, the listing ${listed} objects`;
      return swiftFiles().length === listed || undefined;
    }, 60_000, 500);
    // The oldest restorable second moved past the deleted base and names one the store still
    // has a base for.
    await driver.waitFor(() => Number(driver.db(ID)?.oldestRestoreMs ?? 0) > firstBase.finishedMs!, 60_000, 'oldest_restore_ms past the deleted base');
    const oldest = Number(driver.db(ID)!.oldestRestoreMs);
    expect((await manifests('backups')).some((m) => m.finishedMs! <= oldest)).toBe(true);
  }, 300_000);

  it('a fork\'s read lease holds the archive window back: nothing it would delete goes while the lease is live, and it goes once the lease is gone', async () => {
    explainFailure();
    // A lease as a fork on another agent writes it before reading (agent/backup/read-lease.ts).
    const lease = `${PREFIX}/db/${ID}/leases/fork-99.json`;
    await s3.send(new PutObjectCommand({ Bucket: store.bucket, Key: lease, Body: JSON.stringify({ untilMs: Date.now() + 10 * 60_000 }) }));
    // A new customer backup (a base for the chain): once it is older than the window, every
    // segment ending at or before its snapshot is one retention would delete.
    const c = await connect();
    // A segment archived now, before that backup (the window may have left none).
    const before = Date.now();
    await until('a segment archived', async () => {
      await c.query("INSERT INTO app.t (v) VALUES ('before')");
      return (await manifests('binlog')).some((m) => m.closedMs! > before) || undefined;
    }, 60_000, 500);
    const oldSnap = driver.db(ID)!.backups.find((b) => b.label === 'snap_a')!;
    expect(await runOperation(driver, ID, { deleteBackup: { backupId: oldSnap.id } }, 60_000)).toMatchObject({ ok: true });
    expect(await runOperation(driver, ID, { snapshot: { label: 'snap_e', target: 'primary' } }, 90_000)).toMatchObject({ ok: true });
    const snapE = (await snapshots()).find((m) => m.label === 'snap_e')!;
    const prunable = (await manifests('binlog')).filter((m) => gtidLe(m.gtidEnd!, snapE.snapshotGtid!)).map((m) => m.seq!);
    expect(prunable.length).toBeGreaterThan(0);
    // Rows go on; rounds archive newer segments while the window passes the new backup.
    // Ends as soon as one of them is deleted, or once the window and three rounds have passed.
    const left = await until('the window past the new backup and three rounds archived after it, or a leased segment deleted', async () => {
      await c.query("INSERT INTO app.t (v) VALUES ('leased')");
      const segs = await manifests('binlog');
      const there = prunable.filter((q) => segs.some((m) => m.seq === q));
      seen = `segments retention would delete: ${prunable.join(', ')}; still there: ${there.join(', ')}; segments now ${segs.map((m) => m.seq).join(', ')}`;
      const newer = segs.filter((m) => !gtidLe(m.gtidEnd!, snapE.snapshotGtid!) && m.closedMs! > snapE.finishedMs! + WINDOW_S * 1000);
      return there.length < prunable.length || newer.length >= 3 ? there : undefined;
    }, 120_000, 500);
    expect(left, seen).toEqual(prunable);
    // The fork ended: its lease is gone, and the next rounds delete what the window no longer needs.
    await s3.send(new DeleteObjectCommand({ Bucket: store.bucket, Key: lease }));
    await until('the segments the window no longer needs deleted once the lease is gone', async () => {
      await c.query("INSERT INTO app.t (v) VALUES ('released')");
      const segs = await manifests('binlog');
      seen = `segments retention would delete: ${prunable.join(', ')}; segments now ${segs.map((m) => m.seq).join(', ')}`;
      return prunable.every((q) => !segs.some((m) => m.seq === q)) || undefined;
    }, 120_000, 500);
    await c.end();
  }, 300_000);
});
