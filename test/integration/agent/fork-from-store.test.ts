// Serial integration lane (no marker): two agent-fixture slots (38 and 39), one per agent, and startObjectStore on 127.83.38.1; a concurrent file may use only one slot (docs/testing.md).
/**
 * A fork built on another agent from the shared object store (docs/databases.md, "Fork to a point
 * in time"; docs/agent.md, "Backup store"): two agents on one real S3-compatible store (Swift +
 * s3api over TLS, test/helpers/object-store.ts); the source runs on agent A, which reports its
 * store's identity and encrypts with the backup key the control plane sent it (never one of its
 * own); rows are written across a second boundary; the fork is given to agent B (which does not run
 * the source) with the source's key and a key of its own, as the control plane sends them, and
 * holds exactly the rows committed before the chosen second (count and checksum), none from it or
 * later. It starts from the source's physical base (its state says so): the copy's accounts are
 * reset on agent B, so the source's root and linroot passwords open nothing on the fork, and no
 * source password, password hash or backup key is left anywhere in agent B's folder.
 */
import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { LABEL_DATABASE } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../../lib/logger.js';
import { loadStoreCredentials, parseStoreUrl } from '../../../agent/backup/s3-store.js';
import { BASE_IDS } from '../../../agent/backup/backup-service.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, runOperation } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { middleSecond, startRowWriter, type WrittenRow } from '../../helpers/row-writer.js';

const SOURCE = 81;
const FORK = 82;
const CLIENT = '127.0.0.38';
/** The keys the control plane made for the source and the fork (base64 of 32 bytes). */
const SOURCE_KEY = Buffer.alloc(32, 81).toString('base64');
const FORK_KEY = Buffer.alloc(32, 82).toString('base64');

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
  let a: AgentFixture;
  let b: AgentFixture;
  let src: DesiredDatabase;
  let T = 0;
  let sent: readonly WrittenRow[] = [];
  let fork: DesiredDatabase | undefined;

  beforeAll(async () => {
    store = await startObjectStore({ host: '127.83.38.1' });
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
    await b?.close();
    await a?.close();
    await store?.stop();
  });

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
    await s.query('CREATE DATABASE app');
    await s.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await s.end();
    // A logical backup before the writes too: the physical base is preferred to it.
    expect(await runOperation(a.driver, SOURCE, { snapshot: { label: 'before_rows', target: 'primary' } }, 60_000)).toMatchObject({ ok: true });
    await a.driver.waitFor(() => Number(a.driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 90_000, 'a restorable instant');
    // Its objects are encrypted with the control plane's key: A made none and reports none.
    expect(a.driver.db(SOURCE)?.backupKey ?? '').toBe('');
    expect(JSON.parse(readFileSync(join(a.stateDir, 'databases', String(SOURCE), 'state.json'), 'utf8')).backupKey).toBe(SOURCE_KEY);
    const began = Date.now();
    const writer = startRowWriter({ connect: connectSrc, onError: 'fail' });
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

    const sum = 'SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, \':\', ts))), 0) AS c FROM app.t';
    const src2 = await connectSrc();
    const [expectedRows] = await src2.query(`SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, ':', ts))), 0) AS c FROM app.t WHERE FLOOR(ts) * 1000 < ?`, [T]);
    const [all] = await src2.query('SELECT COUNT(*) AS n FROM app.t');
    await src2.end();
    const want = (expectedRows as { n: number; c: string }[])[0]!;
    expect(Number(want.n)).toBeGreaterThan(0);
    expect(Number(want.n)).toBeLessThan(Number((all as { n: number }[])[0]!.n));
    // Every row acknowledged before T is among them; none sent at T or later.
    const f = await connectFrom({ source: CLIENT, host: fork.hostPrimary!, port: 3306, user: 'linroot', password: fork.rootPassword!, ca: b.driver.db(FORK)!.caCertPem });
    const [got] = await f.query(sum);
    const [ids] = await f.query('SELECT id FROM app.t');
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
});
