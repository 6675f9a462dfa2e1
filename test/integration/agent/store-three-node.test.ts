// integration-lane: concurrent (agent-fixture slot 28: its own 127.76/78/79.28 blocks, port 0, temp folders; startObjectStore on 127.83.28.1 with free ports).
/**
 * The backup store's acceptance on a 3-node database (docs/agent.md §6, "Backup store"; the
 * 1-node case is backup-store.test.ts), against a real S3-compatible store (Swift + s3api over
 * TLS, test/helpers/object-store.ts):
 * - under writes, a snapshot taken from a replica, an auto backup, the archive's base and its
 *   binlog segments land in the store encrypted (Swift's own files are grepped for a row value
 *   and hold none of it), and nothing stays in the agent's state folder or its spool;
 * - the store stopped for 60 s under writes: every write is acknowledged throughout, a snapshot
 *   asked meanwhile fails and leaves nothing listed, the lag shows in the metric and an event,
 *   the archive and backups resume when the store returns, and every `oldest_restore_ms` reported
 *   during the outage names a second the store holds a base and an unbroken chain for.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { Agent as HttpsAgent } from 'node:https';
import { join } from 'node:path';
import { GetObjectCommand, ListObjectsV2Command, S3Client } from '@aws-sdk/client-s3';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';
import type { BackupManifest } from '../../../agent/backup/backup-storage.js';
import { openFields } from '../../../agent/backup/sealed-manifest.js';
import { chainFrom } from '../../../agent/binlog/chain.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { startRowWriter } from '../../helpers/row-writer.js';
import { until } from '../../helpers/lab.js';

const ID = 72;
const PREFIX = 'region-3';
const MARKER = 'fulcrum-three-node-marker-9c4d';
const OUTAGE_MS = 60_000;

interface StoredManifest { id?: number; seq?: number; type?: string; label?: string; finishedMs?: number; snapshotGtid?: string; gtidStart?: string; gtidEnd?: string; closedMs?: number }

/** Every file under dir, recursively. */
function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true, recursive: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

describe('agent: a 3-node database\'s backups in the object store, and a 60 s store outage', () => {
  let store: ObjectStore;
  let s3: S3Client;
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  let registry: Registry;

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.28.1' });
    s3 = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new HttpsAgent({ ca: store.ca }) },
    });
    const backupStore = {
      ...parseStoreUrl(`s3://${store.bucket}/${PREFIX}`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
      credentials: loadStoreCredentials(store.credentialsFile),
    };
    fx = await createAgentFixture({
      id: 'agent-store-three', slot: 28,
      extra: () => ({ binlogArchiveMs: 2000, backupStore, registry: (registry = new Registry()) }),
    });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({
      id: ID, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'semi_synch',
      hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'], backupsScheduled: true, autoBackupDay: '',
      backupKey: Buffer.alloc(32, 72).toString('base64'),
    });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(ID)?.status === 'active', 180_000, 'active');
    // The members accept the endpoint's PROXY header once the agent has set their networks.
    await (await until('the endpoint serves', () => connect(), 60_000, 500)).end();
  }, 300_000);

  afterAll(async () => {
    s3?.destroy();
    await fx?.close();
    await store?.stop();
  });

  const connect = () => connectFrom({ source: '127.0.0.28', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(ID)!.caCertPem });
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
  async function manifests(kind: 'backups' | 'binlog'): Promise<StoredManifest[]> {
    const out: StoredManifest[] = [];
    for (const k of (await keys(kind)).filter((x) => x.endsWith('/manifest.json'))) {
      // Retention (an auto backup or a hidden base pruned) may delete it between listing and read.
      const r = await s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: k })).catch((err: Error) => {
        if (err.name === 'NoSuchKey') return undefined;
        throw err;
      });
      if (!r) continue;
      const m = JSON.parse(await r.Body!.transformToString()) as BackupManifest;
      // A backup's label is sealed with the database's key (agent/backup/sealed-manifest.ts).
      out.push((m.sealed ? { ...m, ...openFields(db.backupKey!, m) } : m) as StoredManifest);
    }
    return out;
  }
  const lag = async () => Number((await registry.getSingleMetric('fulcrum_agent_binlog_archive_lag_seconds')!.get()).values[0]?.value ?? 0);
  const events = () => driver.db(ID)?.events ?? [];

  it('a replica\'s snapshot, an auto backup, the base and segments land in the store encrypted; nothing stays local', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c.query('CREATE TABLE app.m (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))');
    for (let i = 0; i < 20; i++) await c.query('INSERT INTO app.m (v) VALUES (?)', [`${MARKER}-${i}`]);
    const writer = startRowWriter({ connect, onError: 'fail', everyMs: 200 });
    try {
      expect(await runOperation(driver, ID, { snapshot: { label: 'from_replica', target: 'secondary' } }, 120_000)).toMatchObject({ ok: true });
      driver.setDatabases([{ ...db, autoBackupDay: '2099-03-01' }]);
      await driver.waitFor(() => events().some((e) => e.message === 'auto backup for 2099-03-01 taken'), 120_000, 'the auto backup');
      await until('a segment holding the marker rows\' successors', async () => {
        await c.query('INSERT INTO app.m (v) VALUES (?)', [`${MARKER}-later`]);
        return (await manifests('binlog')).length > 0 || undefined;
      }, 90_000, 1000);
    } finally {
      await c.end();
      await writer.stop();
    }
    const backups = await manifests('backups');
    expect(backups.filter((m) => m.type === 'snapshot').map((m) => m.label)).toEqual(['from_replica']);
    expect(backups.filter((m) => m.type === 'auto')).toHaveLength(1);
    expect(backups.some((m) => m.id! > 1_000_000_000)).toBe(true);
    // Every stored object is encrypted (backup-crypto.ts's header) or a manifest; none holds a row.
    const objects = files(store.devicesDir).filter((f) => f.endsWith('.data'));
    expect(objects.length).toBeGreaterThanOrEqual(backups.length * 2);
    for (const f of objects) {
      const bytes = readFileSync(f);
      expect(bytes.includes(MARKER)).toBe(false);
      expect(bytes.subarray(0, 4).toString() === 'FBK1' || bytes[0] === 0x7b).toBe(true);
    }
    // Nothing in the agent's backups folder, and no spool left in the nodes' folders.
    expect(files(join(fx.stateDir, 'backups'))).toEqual([]);
    // (an archive round copies each closed binlog through the spool for a moment: waited out).
    await until('no spool file left', () => files(fx.stateDir).every((f) => !/backup-spool|binlog-spool\/./.test(f)) || undefined, 30_000, 200);
  }, 300_000);

  it('the store stopped for 60 s under writes: every write served, the lag shown, the archive and backups resume', async () => {
    const segmentsBefore = (await manifests('binlog')).length;
    const c = await connect();
    await c.query('CREATE TABLE app.outage (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c.end();
    const writer = startRowWriter({ connect, table: 'app.outage', onError: 'fail', everyMs: 200 });
    const seenOldest = new Set<number>();
    let pausedAt = 0;
    try {
      await writer.waitFor(() => writer.rows.length >= 5, 30_000, 'rows before the outage');
      await store.pause();
      pausedAt = Date.now();
      const during = runOperation(driver, ID, { snapshot: { label: 'during_outage', target: 'primary' } }, 180_000);
      await writer.waitFor(() => {
        const o = Number(driver.db(ID)?.oldestRestoreMs ?? 0);
        if (o > 0) seenOldest.add(o);
        return Date.now() - pausedAt >= OUTAGE_MS;
      }, OUTAGE_MS + 60_000, '60 s of writes with the store stopped');
      const lagSeen = await lag();
      expect(lagSeen).toBeGreaterThan(30);
      await driver.waitFor(() => events().some((e) => /binlog archive is \d+ s behind/.test(e.message)), 30_000, 'the lag event');
      const failed = await during;
      expect(failed.ok).toBe(false);
      // Failed because the store is down (its proxy refuses), not for anything else.
      expect(failed.error).toBe(`connect ECONNREFUSED ${new URL(store.endpoint).host}`);
      await store.resume();
      await driver.waitFor(() => events().some((e) => /binlog archive caught up/.test(e.message)), 120_000, 'the caught-up event');
      await until('the lag metric back down', async () => (await lag()) < 6 || undefined, 60_000, 500);
      // Rows were acknowledged all through the outage (the writer stops at the first error).
      const served = writer.rows.filter((r) => r.ackMs > pausedAt && r.ackMs < pausedAt + OUTAGE_MS).length;
      expect(served).toBeGreaterThan(50);
    } finally {
      await store.resume().catch(() => undefined);
      await writer.stop();
    }
    // The archive resumed: segments closed after the outage are in the store.
    await until('segments archived after the outage', async () => {
      const segs = await manifests('binlog');
      return segs.length > segmentsBefore && segs.some((s) => s.closedMs! > pausedAt + OUTAGE_MS) || undefined;
    }, 90_000, 1000);
    // The snapshot asked during the outage left nothing listed; one asked now is stored.
    expect((await manifests('backups')).some((m) => m.label === 'during_outage')).toBe(false);
    expect(await runOperation(driver, ID, { snapshot: { label: 'after_outage', target: 'primary' } }, 120_000)).toMatchObject({ ok: true });
    expect((await manifests('backups')).some((m) => m.label === 'after_outage')).toBe(true);
    // Each oldest_restore_ms reported during the outage is a second the store can give back: a
    // base finished by then, with an unbroken chain of stored segments after it.
    expect(seenOldest.size).toBeGreaterThan(0);
    const bases = (await manifests('backups')).filter((m) => m.snapshotGtid);
    const segments = (await manifests('binlog')).map((m) => ({ seq: m.seq!, gtidStart: m.gtidStart!, gtidEnd: m.gtidEnd!, closedMs: m.closedMs! }));
    for (const v of seenOldest) {
      expect(bases.some((b) => b.finishedMs! <= v && chainFrom(b.snapshotGtid!, segments) !== undefined), `oldest_restore_ms ${v}`).toBe(true);
    }
  }, 420_000);
});
