// integration-lane: concurrent (agent-fixture slot 34: its own 127.76/78/79.34 blocks, port 0, temp folders; startObjectStore on 127.83.34.1 with free ports).
/**
 * An agent whose backup store is a real S3-compatible object store (Swift + s3api over TLS,
 * test/helpers/object-store.ts; docs/agent.md, "Backup store"): a 1-node database under writes
 * gets its snapshot, base and binlog segments into the store, encrypted (the store's files are
 * grepped for a row value and hold none of it), with object names free of tenant text, and
 * nothing kept in the agent's state folder. The store stopped under writes: the database keeps
 * serving, the archive lag shows in the metric and an event, and the archive catches up when the
 * store returns. A deleted backup and then the database's delete remove their objects (counted
 * in the store).
 */
import { randomBytes } from 'node:crypto';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { until } from '../../helpers/lab.js';

const ID = 61;
const MARKER = 'fulcrum-row-marker-5e1f';
const LABEL = 'tenant_label_zq';

/** Every file under dir, recursively. */
function files(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir, { withFileTypes: true, recursive: true }).filter((e) => e.isFile()).map((e) => join(e.parentPath, e.name));
}

describe('agent: backups and the binlog archive in an S3-compatible object store', () => {
  let store: ObjectStore;
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  let registry: Registry;

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.34.1' });
    const backupStore = {
      ...parseStoreUrl(`s3://${store.bucket}/region-a`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
      credentials: loadStoreCredentials(store.credentialsFile),
    };
    fx = await createAgentFixture({
      id: 'agent-backup-store', slot: 34,
      extra: () => ({ binlogArchiveMs: 2000, backupStore, registry: (registry = new Registry()) }),
    });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: ID, engineId: engine!.id, version: engine!.version, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(ID)?.status === 'active', 90_000, 'active');
  }, 240_000);

  afterAll(async () => {
    await fx?.close();
    await store?.stop();
  });

  const connect = () => connectFrom({ source: '127.0.0.34', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(ID)!.caCertPem });
  const insert = async (n: number) => {
    const c = await connect();
    for (let i = 0; i < n; i++) await c.query('INSERT INTO app.t (v) VALUES (?)', [`${MARKER}-${i}`]);
    await c.end();
  };
  /** Object files in the store (Swift keeps each object as a .data file) under this database. */
  const stored = () => files(store.devicesDir).filter((f) => f.endsWith('.data'));
  const lag = async () => Number((await registry.getSingleMetric('fulcrum_agent_binlog_archive_lag_seconds')!.get()).values[0]?.value ?? 0);
  const events = () => driver.db(ID)?.events ?? [];
  /** Multipart uploads begun under this database and neither completed nor aborted. */
  async function multipartUploads(): Promise<number> {
    const { S3Client, ListMultipartUploadsCommand } = await import('@aws-sdk/client-s3');
    const { Agent } = await import('node:https');
    const client = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new Agent({ ca: store.ca }) },
    });
    try {
      return ((await client.send(new ListMultipartUploadsCommand({ Bucket: store.bucket, Prefix: `region-a/db/${ID}/` }))).Uploads ?? []).length;
    } finally {
      client.destroy();
    }
  }
  /** Data objects whose folder has no manifest. */
  async function unmanifested(): Promise<string[]> {
    const keys = [...await storeList('backups'), ...await storeList('binlog')];
    const dirs = new Set(keys.filter((k) => k.endsWith('/manifest.json')).map((k) => k.slice(0, k.lastIndexOf('/'))));
    return keys.filter((k) => !dirs.has(k.slice(0, k.lastIndexOf('/'))));
  }
  async function storeList(kind: 'binlog' | 'backups'): Promise<string[]> {
    const { S3Client, ListObjectsV2Command } = await import('@aws-sdk/client-s3');
    const { Agent } = await import('node:https');
    const client = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new Agent({ ca: store.ca }) },
    });
    try {
      const r = await client.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: `region-a/db/${ID}/${kind}/` }));
      return (r.Contents ?? []).map((x) => x.Key!);
    } finally {
      client.destroy();
    }
  }

  it('snapshot, base and segments land in the store encrypted, named without tenant text, and nothing stays local', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(64))');
    await c.end();
    await insert(20);
    expect(await runOperation(driver, ID, { snapshot: { label: LABEL, target: 'primary' } }, 60_000)).toMatchObject({ ok: true });
    await driver.waitFor(() => Number(driver.db(ID)?.oldestRestoreMs ?? 0) > 0, 90_000, 'a restorable instant');
    await insert(20);
    await until('an archived segment', async () => (await storeList('binlog')).some((k) => k.endsWith('/manifest.json')), 60_000, 500);

    const keys = [...await storeList('backups'), ...await storeList('binlog')];
    // A snapshot, a base and at least one segment, each with its data file and manifest.
    expect(keys.filter((k) => /\/backups\/\d+\/dump\.sql\.zst\.aes$/.test(k)).length).toBeGreaterThanOrEqual(1);
    expect(keys.some((k) => /\/backups\/\d+\/base\.mbstream\.zst\.aes$|\/backups\/1\d{9}\/dump\.sql\.zst\.aes$/.test(k))).toBe(true);
    expect(keys.some((k) => /\/binlog\/\d+\/binlog\.zst\.aes$/.test(k))).toBe(true);
    for (const k of keys) expect(k).toMatch(/^region-a\/db\/61\/(backups|binlog)\/\d+\/[a-z.]+$/);
    for (const k of keys) expect(k).not.toMatch(/app|tenant|label/);

    // The store's own files hold no row: the marker is in no object's bytes.
    const objects = stored();
    expect(objects.length).toBeGreaterThanOrEqual(keys.length);
    for (const f of objects) {
      const bytes = readFileSync(f);
      expect(bytes.includes(MARKER)).toBe(false);
      // Each object is either encrypted (backup-crypto.ts's header) or a manifest (JSON): no zstd or gzip
      // stream a reader could simply inflate.
      expect(bytes.subarray(0, 4).toString() === 'FBK1' || bytes[0] === 0x7b).toBe(true);
    }
    // Nothing of it is kept in the agent's state folder (its backups folder stays empty).
    const local = files(join(fx.stateDir, 'backups'));
    expect(local).toEqual([]);
    expect(statSync(fx.stateDir).isDirectory()).toBe(true);
  }, 240_000);

  it('with the store stopped the database serves, the lag shows in the metric and an event, and the archive catches up', async () => {
    const before = (await storeList('binlog')).length;
    await store.pause();
    const pausedAt = Date.now();
    // Writes go on while the store is away.
    while (Date.now() - pausedAt < 15_000) {
      await insert(5);
      await new Promise((r) => setTimeout(r, 500));
    }
    await until('the lag metric above three rounds', async () => (await lag()) > 6, 60_000, 500);
    await driver.waitFor(() => events().some((e) => e.action === 'database_backup_create' && /binlog archive is \d+ s behind/.test(e.message)), 60_000, 'the lag event');
    await store.resume();
    await driver.waitFor(() => events().some((e) => /binlog archive caught up/.test(e.message)), 90_000, 'the caught-up event');
    await until('the lag metric back down', async () => (await lag()) < 6, 60_000, 500);
    expect((await storeList('binlog')).length).toBeGreaterThan(before);
    const c = await connect();
    const [rows] = await c.query('SELECT COUNT(*) AS n FROM app.t');
    await c.end();
    expect(Number((rows as { n: number }[])[0]!.n)).toBeGreaterThanOrEqual(40 + 5 * 10);
  }, 240_000);

  it('an agent SIGKILLed mid-upload leaves nothing listed, and its next start removes the parts', async () => {
    // About 12 MB of random bytes: the next dump and base are multipart uploads (8 MiB parts).
    const c = await connect();
    await c.query('CREATE TABLE app.big (id INT PRIMARY KEY, b LONGBLOB)');
    for (let i = 0; i < 12; i++) await c.query('INSERT INTO app.big VALUES (?, ?)', [i, randomBytes(1024 * 1024)]);
    await c.end();
    await fx.agent!.close();
    fx.agent = undefined;
    const child = await fx.spawnAgent({
      BACKUP_STORE: `s3://${store.bucket}/region-a`, BACKUP_STORE_ENDPOINT: store.endpoint, BACKUP_STORE_CA: store.caFile,
      BACKUP_STORE_CREDENTIALS: store.credentialsFile, BINLOG_ARCHIVE_MS: '2000',
    });
    const opId = `op-kill-${Date.now()}`;
    driver.addOperation({ operationId: opId, databaseId: ID, snapshot: { label: 'killed_mid_upload', target: 'primary' } });
    await until('a multipart upload in flight', async () => (await multipartUploads()) > 0, 120_000, 200);
    child.kill('SIGKILL');
    await new Promise((r) => child.once('exit', r));
    // What the kill left: parts without an object, or an object without its manifest; none listed.
    expect(await multipartUploads() + (await unmanifested()).length).toBeGreaterThan(0);

    await fx.startAgent();
    // The next start sweeps the leftovers (backups once per start, segments in the first round).
    await until('no unfinished upload nor unlisted object', async () => (await multipartUploads()) === 0 && (await unmanifested()).length === 0, 120_000, 500);
    await driver.waitFor(() => driver.db(ID)?.status === 'active', 90_000, 'active again');
  }, 300_000);

  it('a deleted backup and the deleted database leave no object behind', async () => {
    const snap = driver.db(ID)!.backups.find((b) => b.label === LABEL)!;
    expect(await runOperation(driver, ID, { deleteBackup: { backupId: snap.id } }, 60_000)).toMatchObject({ ok: true });
    expect((await storeList('backups')).filter((k) => k.includes(`/backups/${snap.id}/`))).toEqual([]);
    expect((await storeList('binlog')).length).toBeGreaterThan(0);
    expect((await storeList('backups')).length).toBeGreaterThan(0);
    driver.setDatabases([]);
    await driver.waitFor(() => driver.last() && !driver.db(ID), 90_000, 'database gone from reports');
    await until('no object of the database left', async () => (await storeList('backups')).length + (await storeList('binlog')).length === 0, 60_000, 500);
    expect(stored()).toEqual([]);
  }, 240_000);
});
