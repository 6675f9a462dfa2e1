// integration-lane: concurrent (agent-fixture slots 38 and 39, one per agent: their own 127.76/78/79.38 and .39 blocks, port 0, temp folders; startObjectStore on 127.83.38.1 with free ports; client source addresses only as local ends).
/**
 * A fork built on another agent from the shared object store (docs/databases.md, "Fork to a point
 * in time"; docs/agent.md, "Backup store"): two agents on one real S3-compatible store (Swift +
 * s3api over TLS, test/helpers/object-store.ts); the source runs on agent A, which reports its
 * store's identity and encrypts with the backup key the control plane sent it (never one of its
 * own); rows are written across a second boundary; the fork is given to agent B (which does not run
 * the source) with the source's key and a key of its own, as the control plane sends them, and
 * holds exactly the rows committed before the chosen second (count and checksum), none from it or
 * later. Then: no file the store keeps holds the tenant's schema name or snapshot label (sealed
 * manifests); the fork, fenced to move and deleted during the fence, leaves no object; and a
 * second fork, its agent SIGKILLed mid-read (crash point), keeps the deleted source's objects
 * alive through its read lease, ends with exact rows on the next start, and the source's objects
 * go after it. The fork starts from the source's physical base (its state says so): the copy's
 * accounts are reset on agent B, so the source's root and linroot passwords open nothing on the
 * fork, and no source password, password hash or backup key is left anywhere in agent B's folder.
 * A fork asked for while the source's physical bases in the store are corrupted (bytes in the
 * middle of the objects overwritten, manifests kept) fails with an error naming the corruption,
 * nothing of the copy is placed, and the source keeps running with every row.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { Agent as HttpsAgent } from 'node:https';
import { GetObjectCommand, ListObjectsV2Command, PutObjectCommand, S3Client } from '@aws-sdk/client-s3';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { LABEL_DATABASE } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../../lib/logger.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';
import { BASE_IDS } from '../../../agent/backup/backup-service.js';
import { PHYSICAL_ENCRYPTED_FILE } from '../../../agent/backup/physical-backup.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { until } from '../../helpers/lab.js';
import { middleSecond, startRowWriter, type WrittenRow } from '../../helpers/row-writer.js';

const SOURCE = 81;
const FORK = 82;
const CLIENT = '127.0.0.38';
/** The keys the control plane made for the source and the fork (base64 of 32 bytes). */
const SOURCE_KEY = Buffer.alloc(32, 81).toString('base64');
const FORK_KEY = Buffer.alloc(32, 82).toString('base64');
/** A second fork of the source, built while the source is deleted. */
const FORK2 = 83;
/** A fork asked for while the source's physical bases in the store are corrupted. */
const FORK_BAD = 84;
/** What a tenant wrote, distinctive enough to grep the store's files for: a schema name and a snapshot label. */
const SCHEMA = 'zq_schema_7731';
const LABEL = 'zq_label_5519';

/** mysql_native_password's stored form of a password (what mysql.global_priv holds). */
const nativeHash = (pw: string) => `*${createHash('sha1').update(createHash('sha1').update(pw).digest()).digest('hex').toUpperCase()}`;

/** The files under dir (not following links) holding any of the needles, with the needle found. */
function filesHolding(dir: string, needles: string[]): string[] {
  const found: string[] = [];
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) found.push(...filesHolding(path, needles));
    else if (e.isFile()) {
      const data = readFileSync(path);
      for (const n of needles) if (data.includes(n)) found.push(`${path}: ${n.slice(0, 6)}...`);
    }
  }
  return found;
}

/** Logs in as root over a node's socket: true when the server lets the password in. */
async function rootLogin(socketPath: string, password: string): Promise<boolean> {
  const mysql = (await import('mysql2/promise')).default;
  try {
    const c = await mysql.createConnection({ socketPath, user: 'root', password });
    await c.end();
    return true;
  } catch (err) {
    if ((err as { code?: string }).code === 'ER_ACCESS_DENIED_ERROR') return false;
    throw err;
  }
}

describe('agent: a fork from the shared object store on an agent that does not run the source', () => {
  let store: ObjectStore;
  let s3: S3Client;
  let a: AgentFixture;
  let b: AgentFixture;
  let src: DesiredDatabase;
  let T = 0;
  /** The source's rows committed before T: count and checksum. */
  let want: { n: number; c: string } = { n: 0, c: '' };
  /** Agent B as its own process (the lease test SIGKILLs it mid-read). */
  let child: ChildProcess | undefined;
  let sent: readonly WrittenRow[] = [];
  let fork: DesiredDatabase | undefined;

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.38.1' });
    s3 = new S3Client({
      endpoint: store.endpoint, region: store.region, forcePathStyle: true, credentials: { accessKeyId: store.accessKeyId, secretAccessKey: store.secretAccessKey },
      requestHandler: { httpsAgent: new HttpsAgent({ ca: store.ca }) },
    });
    const backupStore = {
      ...parseStoreUrl(`s3://${store.bucket}/region-x`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
      credentials: loadStoreCredentials(store.credentialsFile),
    };
    a = await createAgentFixture({ id: 'agent-store-a', slot: 38, extra: () => ({ binlogArchiveMs: 2000, backupStore }) });
    b = await createAgentFixture({ id: 'agent-store-b', slot: 39, extra: () => ({ binlogArchiveMs: 2000, backupStore }) });
    await Promise.all([a.startAgent(), b.startAgent()]);
    const [engine] = await detectLocalCatalogue();
    src = desiredDb({ id: SOURCE, engineId: engine!.id, version: engine!.version, hostPrimary: `${a.net}.1`, hostSecondary: `${a.net}.2`, allowList: ['0.0.0.0/0'], backupKey: SOURCE_KEY });
    a.driver.setDatabases([src]);
    await a.driver.waitFor(() => a.driver.db(SOURCE)?.status === 'active', 90_000, 'source active');
  }, 240_000);

  afterAll(async () => {
    s3?.destroy();
    child?.kill('SIGKILL');
    await b?.close();
    await a?.close();
    await store?.stop();
  });

  /** Every object of database `id` in the store (data, manifests), listed. */
  async function objectsOf(id: number): Promise<string[]> {
    const out: string[] = [];
    let token: string | undefined;
    do {
      const r = await s3.send(new ListObjectsV2Command({ Bucket: store.bucket, Prefix: `region-x/db/${id}/`, ContinuationToken: token }));
      for (const x of r.Contents ?? []) out.push(x.Key!);
      token = r.IsTruncated ? r.NextContinuationToken : undefined;
    } while (token);
    return out;
  }

  const connectSrc = () => connectFrom({ source: CLIENT, host: src.hostPrimary!, port: 3306, user: 'linroot', password: src.rootPassword!, ca: a.driver.db(SOURCE)!.caCertPem });

  it('both agents name the same store, and no agent reports a key of its own', async () => {
    await a.driver.waitFor(() => !!a.driver.last()?.backupStore && !!b.driver.last()?.backupStore, 30_000, 'store identities');
    expect(a.driver.last()!.backupStore).toBe(b.driver.last()!.backupStore);
    expect(a.driver.last()!.backupStore).toContain(store.bucket);
    expect(a.driver.last()!.backupStore).not.toContain(store.secretAccessKey);
    expect(a.driver.last()!.backupStore).not.toContain(store.accessKeyId);
  });

  it('holds exactly the source\'s rows committed before the chosen second, built on agent B', async () => {
    const s = await connectSrc();
    await s.query(`CREATE DATABASE ${SCHEMA}`);
    await s.query(`CREATE TABLE ${SCHEMA}.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)`);
    await s.end();
    // A logical backup before the writes too: the physical base is preferred to it.
    expect(await runOperation(a.driver, SOURCE, { snapshot: { label: LABEL, target: 'primary' } }, 60_000)).toMatchObject({ ok: true });
    await a.driver.waitFor(() => Number(a.driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 90_000, 'a restorable instant');
    // Its objects are encrypted with the control plane's key: A made none and reports none.
    expect(a.driver.db(SOURCE)?.backupKey ?? '').toBe('');
    expect(JSON.parse(readFileSync(join(a.stateDir, 'databases', String(SOURCE), 'state.json'), 'utf8')).backupKey).toBe(SOURCE_KEY);
    const began = Date.now();
    const writer = startRowWriter({ connect: connectSrc, table: `${SCHEMA}.t`, onError: 'fail' });
    sent = writer.rows;
    await writer.waitFor(() => Date.now() - began >= 4000 && sent.length >= 20, 60_000, 'rows for 4 s');
    T = middleSecond(began);
    await writer.waitFor(() => Date.now() >= T + 2500, 30_000, 'writes past the chosen second');
    await writer.stop();
    expect(sent.some((r) => r.ackMs < T) && sent.some((r) => r.sentMs >= T)).toBe(true);

    fork = desiredDb({
      id: FORK, engineId: src.engineId, version: src.version, rootPassword: 'Fork.Pass_82', hostPrimary: `${b.net}.1`, hostSecondary: `${b.net}.2`,
      allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T, forkSourceKey: SOURCE_KEY, backupKey: FORK_KEY,
    });
    b.driver.setDatabases([fork]);
    await b.driver.waitFor(() => b.driver.db(FORK)?.status === 'active', 180_000, 'fork active on agent B');
    // Agent B never ran the source, and built the fork from the source's physical base in the store.
    expect(b.driver.db(SOURCE)).toBeUndefined();
    expect(existsSync(join(b.stateDir, 'databases', String(SOURCE)))).toBe(false);
    const forkState = JSON.parse(readFileSync(join(b.stateDir, 'databases', String(FORK), 'state.json'), 'utf8'));
    expect(forkState.forkBase?.kind).toBe('physical');
    expect(forkState.forkBase?.backupId).toBeGreaterThanOrEqual(BASE_IDS);
    // The fork's own objects get the fork's key, not the source's.
    expect(forkState.backupKey).toBe(FORK_KEY);
    expect(b.driver.db(FORK)?.backupKey ?? '').toBe('');

    const sum = `SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM ${SCHEMA}.t`;
    const src2 = await connectSrc();
    const [expectedRows] = await src2.query(`SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM ${SCHEMA}.t WHERE FLOOR(ts) * 1000 < ?`, [T]);
    const [all] = await src2.query(`SELECT COUNT(*) AS n FROM ${SCHEMA}.t`);
    await src2.end();
    want = (expectedRows as { n: number; c: string }[])[0]!;
    expect(Number(want.n)).toBeGreaterThan(0);
    expect(Number(want.n)).toBeLessThan(Number((all as { n: number }[])[0]!.n));
    // Every row acknowledged before T is among them; none sent at T or later.
    const f = await connectFrom({ source: CLIENT, host: fork.hostPrimary!, port: 3306, user: 'linroot', password: fork.rootPassword!, ca: b.driver.db(FORK)!.caCertPem });
    const [got] = await f.query(sum);
    const [ids] = await f.query(`SELECT id FROM ${SCHEMA}.t`);
    await f.end();
    const have = new Set((ids as { id: number }[]).map((r) => Number(r.id)));
    for (const r of sent) {
      if (r.ackMs < T) expect(have.has(r.id)).toBe(true);
      if (r.sentMs >= T) expect(have.has(r.id)).toBe(false);
    }
    const g = (got as { n: number; c: string }[])[0]!;
    expect([Number(g.n), String(g.c)]).toEqual([Number(want.n), String(want.c)]);
  }, 300_000);

  it('the source\'s passwords open nothing on the fork, and none of its secrets is on agent B\'s disk', async () => {
    expect(T).toBeGreaterThan(0);
    const srcState = JSON.parse(readFileSync(join(a.stateDir, 'databases', String(SOURCE), 'state.json'), 'utf8')) as { adminPassword: string; replPassword: string };
    const forkState = JSON.parse(readFileSync(join(b.stateDir, 'databases', String(FORK), 'state.json'), 'utf8')) as { adminPassword: string };
    expect(srcState.adminPassword).not.toBe(forkState.adminPassword);
    // The tenant's linroot with the source's password, from where the allow-list lets it in.
    const login = (password: string) => connectFrom({ source: CLIENT, host: `${b.net}.1`, port: 3306, user: 'linroot', password, ca: b.driver.db(FORK)!.caCertPem }).then(
      async (c) => { await c.end(); return true; },
      (err: { code?: string }) => { if (err.code === 'ER_ACCESS_DENIED_ERROR') return false; throw err; });
    expect(await login(src.rootPassword!)).toBe(false);
    expect(await login('Fork.Pass_82')).toBe(true);
    // The agent's admin (root over the node's socket) with the source's password, on every node of the fork.
    const rt = createProcessRuntime({ root: join(b.stateDir, 'runtime'), logger: silentLogger() });
    const nodes = (await rt.list({})).filter((n) => n.labels[LABEL_DATABASE] === String(FORK));
    expect(nodes.length).toBeGreaterThan(0);
    for (const n of nodes) {
      const { socketPath } = await rt.connection(n.name);
      expect(await rootLogin(socketPath, srcState.adminPassword)).toBe(false);
      expect(await rootLogin(socketPath, forkState.adminPassword)).toBe(true);
    }
    // The control plane stops sending the source's key once the fork is provisioned
    // (agent-desired.ts): so does this stand-in, and agent B's copy of its desired state follows.
    b.driver.setDatabases([{ ...fork!, forkSourceKey: '' }]);
    const desiredFile = join(b.stateDir, 'desired.json');
    await b.driver.waitFor(() => !readFileSync(desiredFile).includes(SOURCE_KEY), 30_000, 'desired.json without the source\'s key');
    // No source password, nor its stored hash, nor the source's backup key, in any file of agent B.
    const secrets = [srcState.adminPassword, srcState.replPassword, src.rootPassword!];
    expect(filesHolding(b.stateDir, [...secrets, ...secrets.map(nativeHash), SOURCE_KEY])).toEqual([]);
  }, 60_000);

  it('a fork from a corrupted physical base fails naming the corruption; nothing is placed for it and the source is untouched', async () => {
    expect(T).toBeGreaterThan(0);
    const before = await connectSrc();
    const [rows] = await before.query(`SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM ${SCHEMA}.t`);
    await before.end();
    // Every physical base of the source: bytes in the middle of the object overwritten in the
    // store (same length, its manifest kept), so whichever the fork picks is corrupted.
    const bases = (await objectsOf(SOURCE)).filter((k) => k.endsWith(`/${PHYSICAL_ENCRYPTED_FILE}`));
    expect(bases.length).toBeGreaterThan(0);
    const kept = new Map<string, Buffer>();
    for (const key of bases) {
      const r = await s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: key }));
      const bytes = Buffer.from(await r.Body!.transformToByteArray());
      kept.set(key, bytes);
      const bad = Buffer.from(bytes);
      const mid = Math.floor(bad.length / 2);
      for (let i = mid; i < Math.min(bad.length, mid + 64); i++) bad[i] = bad[i]! ^ 0xa5;
      await s3.send(new PutObjectCommand({ Bucket: store.bucket, Key: key, Body: bad }));
    }
    try {
      const bad = desiredDb({
        id: FORK_BAD, engineId: src.engineId, version: src.version, rootPassword: 'Fork.Pass_84', hostPrimary: `${b.net}.5`, hostSecondary: `${b.net}.6`,
        allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T, forkSourceKey: SOURCE_KEY, backupKey: Buffer.alloc(32, 84).toString('base64'),
      });
      b.driver.setDatabases([{ ...fork!, forkSourceKey: '' }, bad]);
      const failed = await b.driver.waitFor(() => b.driver.db(FORK_BAD)?.error || undefined, 180_000, 'the fork from the corrupted base failed');
      expect(failed).toMatch(/backup \d+ is corrupted: its checksum is [0-9a-f]{12}\.\.\., the manifest says [0-9a-f]{12}\.\.\.; nothing was changed/);
      // Nothing of the copy is left: no unpacked folder beside the fork's nodes, and no node's
      // data directory holds the source's schema.
      const rt = createProcessRuntime({ root: join(b.stateDir, 'runtime'), logger: silentLogger() });
      const nodes = (await rt.list({})).filter((n) => n.labels[LABEL_DATABASE] === String(FORK_BAD));
      expect(nodes.length).toBeGreaterThan(0);
      for (const n of nodes) {
        const runDir = dirname((await rt.connection(n.name)).socketPath);
        expect(readdirSync(runDir).filter((f) => f.startsWith('fork-base'))).toEqual([]);
        const dataDir = (await rt.inspect(n.name)).spec!.dataDir!;
        expect(existsSync(join(dataDir, SCHEMA))).toBe(false);
      }
      expect(existsSync(join(b.stateDir, 'databases', String(FORK_BAD), 'state.json'))
        && JSON.parse(readFileSync(join(b.stateDir, 'databases', String(FORK_BAD), 'state.json'), 'utf8')).forkBase).toBeFalsy();
    } finally {
      b.driver.setDatabases([{ ...fork!, forkSourceKey: '' }], { deleted: [FORK_BAD] });
      for (const [key, bytes] of kept) await s3.send(new PutObjectCommand({ Bucket: store.bucket, Key: key, Body: bytes }));
    }
    await b.driver.waitFor(() => b.driver.last() && !b.driver.db(FORK_BAD), 90_000, 'the failed fork gone from agent B');
    // The source is untouched: active, every row as it was, its base readable again.
    expect(a.driver.db(SOURCE)?.status).toBe('active');
    const after = await connectSrc();
    const [again] = await after.query(`SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM ${SCHEMA}.t`);
    await after.end();
    expect(again).toEqual(rows);
    for (const [key, bytes] of kept) {
      const r = await s3.send(new GetObjectCommand({ Bucket: store.bucket, Key: key }));
      expect(Buffer.from(await r.Body!.transformToByteArray()).equals(bytes)).toBe(true);
    }
  }, 300_000);

  it('the store\'s files hold no schema name nor snapshot label a tenant wrote, and agent A still lists the label', async () => {
    // Manifests of backups, bases and binlog segments, data and the store's own databases: every file.
    const hits: string[] = [];
    const walk = (dir: string) => {
      for (const e of readdirSync(dir, { withFileTypes: true })) {
        const p = join(dir, e.name);
        if (e.isDirectory()) walk(p);
        else if (e.isFile()) {
          const bytes = readFileSync(p);
          for (const needle of [SCHEMA, LABEL]) if (bytes.includes(needle)) hits.push(`${needle} in ${p}`);
        }
      }
    };
    walk(store.devicesDir);
    expect(hits).toEqual([]);
    // The manifests are there and read back with the key: the snapshot keeps its label.
    expect(a.driver.db(SOURCE)?.backups.map((x) => x.label)).toContain(LABEL);
  });

  it('a 1-node database deleted while fenced to move (the move abandoned by the delete) leaves no object in the store', async () => {
    // The fork on agent B archives into the store like any database (its chain's base first).
    await until('the fork\'s objects in the store', async () => (await objectsOf(FORK)).length > 0, 90_000, 500);
    expect(await runOperation(b.driver, FORK, { fence: { term: 0, member: 1 } }, 90_000)).toMatchObject({ ok: true });
    // The control plane deletes it before placing it anywhere: gone, not moved.
    b.driver.setDatabases([], { deleted: [FORK] });
    await b.driver.waitFor(() => b.driver.last() && !b.driver.db(FORK), 90_000, 'fork gone from agent B\'s reports');
    await until('no object of the deleted database left', async () => (await objectsOf(FORK)).length === 0, 60_000, 500);
  }, 240_000);

  it('a fork reading the store while its source is deleted ends with exact rows; the source\'s objects go once it has ended', async () => {
    // Agent B again, as its own process that stops itself right after the fork's first replayed
    // binlog segment (docs/testing.md, "Crash points"): killed in the middle of its read.
    await b.agent?.close();
    b.agent = undefined;
    const env = {
      BACKUP_STORE: `s3://${store.bucket}/region-x`, BACKUP_STORE_ENDPOINT: store.endpoint, BACKUP_STORE_CA: store.caFile,
      BACKUP_STORE_CREDENTIALS: store.credentialsFile, BINLOG_ARCHIVE_MS: '2000',
    };
    const fork2 = desiredDb({
      id: FORK2, engineId: src.engineId, version: src.version, rootPassword: 'Fork.Pass_83', hostPrimary: `${b.net}.3`, hostSecondary: `${b.net}.4`,
      allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T, forkSourceKey: SOURCE_KEY, backupKey: Buffer.alloc(32, 83).toString('base64'),
    });
    b.driver.setDatabases([fork2]);
    child = await b.spawnAgent({ ...env, FULCRUM_CRASH_AT: 'fork-replayed-segment' });
    const killed = child;
    await until('agent B killed mid-read', () => killed.exitCode !== null || killed.signalCode !== null, 180_000, 200);
    expect(killed.signalCode).toBe('SIGKILL');
    // The source is deleted while the fork has read only part of what it needs.
    a.driver.setDatabases([], { deleted: [SOURCE] });
    await a.driver.waitFor(() => a.driver.last() && !a.driver.db(SOURCE), 90_000, 'source gone from agent A\'s reports');
    // Its objects wait for the fork's lease (written before the fork's first read).
    expect((await objectsOf(SOURCE)).some((k) => k.includes('/backups/'))).toBe(true);
    expect((await objectsOf(SOURCE)).some((k) => k.includes('/binlog/'))).toBe(true);
    // B's next start retries the fork from scratch and finishes it from the store.
    child = await b.spawnAgent(env);
    await b.driver.waitFor(() => b.driver.db(FORK2)?.status === 'active', 240_000, 'second fork active on agent B');
    const f = await connectFrom({ source: CLIENT, host: fork2.hostPrimary!, port: 3306, user: 'linroot', password: fork2.rootPassword!, ca: b.driver.db(FORK2)!.caCertPem });
    const [got] = await f.query(`SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM ${SCHEMA}.t`);
    await f.end();
    const g = (got as { n: number; c: string }[])[0]!;
    expect([Number(g.n), String(g.c)]).toEqual([Number(want.n), String(want.c)]);
    // The fork has ended: its lease is gone, and agent A's next tick (once a minute) purges the source.
    await until('no object of the deleted source left', async () => (await objectsOf(SOURCE)).length === 0, 180_000, 1000);
  }, 600_000);
});
