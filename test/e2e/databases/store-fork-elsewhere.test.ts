// e2e-lane: concurrent (port 0, two ownOctet() blocks of its own (endpoints, nodes, the store's address), temp folders, process runtime only).
/**
 * Point-in-time forks built from the object store on another agent host than the one that wrote
 * the objects, through the real control plane and API (docs/databases.md, "Fork to a point in
 * time", "Placement with a shared object store"; the API has no in-place restore to a time:
 * today's clients restore to a point in time by forking, and an in-place restore takes a backup).
 *
 * Two `fulcrum agent` processes share one real S3-compatible store (Swift + s3api over TLS,
 * test/helpers/object-store.ts). A 1-node source on agent A gets rows every 100 ms through its
 * hosts.primary across several second boundaries, each stamped by the server with its statement
 * time. Agent A is then killed (its database's objects stay in the store), so the control plane
 * places two forks, to two different seconds T1 < T2, on agent B, which never ran the source.
 * Each holds exactly the source's rows stamped before its second (row count and checksum; every
 * row acknowledged before it, none sent at it or later), and the store's files hold no plaintext
 * of a row every fork restored. Agent A is killed (SIGKILL) in the middle of an upload: what it
 * leaves in the store is listed by no agent, and the forks are built beside it.
 */
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readdirSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createS3Stores, loadStoreCredentials, parseStoreUrl, type S3Stores } from '../../../agent/backup/s3-store.js';
import { enrolHost } from '../../helpers/fleet.js';
import { watch, type HostProcess } from '../../helpers/hosts.js';
import { repoRoot, testRateLimits } from '../../helpers/lab.js';
import { engineOfSeries } from '../../helpers/engines.js';
import { startObjectStore, type ObjectStore } from '../../helpers/object-store.js';
import { startRowWriter, type WrittenRow } from '../../helpers/row-writer.js';
import type { OctetClaim } from '../../helpers/address-blocks.js';
import { spawn } from 'node:child_process';
import { MYSQL, connectFrom, ownOctet, until } from './db-lab.js';

const CLIENT = '127.64.0.2';
/** The agents' --binlog-archive-interval (seconds): how soon the archive reaches past T2. */
const ARCHIVE_S = 2;
const SUM = 'COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT(id, \':\', ts))), 0) AS c';

interface Agent { id: string; dir: string; net: string; proc?: HostProcess }

describe('point-in-time forks built from the object store on another agent host than the one that wrote it', () => {
  const claims: OctetClaim[] = [];
  let dir: string;
  let cp: ControlPlane;
  let dataplane: Dataplane;
  let store: ObjectStore;
  let reader: S3Stores;
  let agents: Agent[] = [];
  let storeArgs: string[] = [];

  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(cp.apiUrl + path, {
      method,
      headers: { authorization: `Bearer ${cp.adminToken}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 500) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    return { status: res.status, body: JSON.parse(text) };
  };
  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const connected = async () => new Set(((await ok('GET', '/v4/fulcrum/agents')).data as { id: string; connected: boolean }[]).filter((a) => a.connected).map((a) => a.id));
  /** `fulcrum agent` from the sources, its certificate enrolled beforehand (id and region come from it). */
  const startAgent = async (a: Agent) => {
    a.proc = watch(spawn(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), 'agent', '--control-plane', cp.grpcAddress, '--state', a.dir,
      '--runtime', 'process', '--node-pool', `${a.net}.0/24`, ...storeArgs], {
      cwd: repoRoot, env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'info' }, stdio: ['ignore', 'pipe', 'pipe'],
    }));
    await until(`agent ${a.id} connected`, async () => {
      if (a.proc!.proc.exitCode !== null) throw new Error(`agent ${a.id} exited: ${a.proc!.output().slice(-3000)}`);
      return (await connected()).has(a.id) || undefined;
    }, 180_000, 250);
  };
  /** Fails with the database's newest failed event, or returns it once `status`. */
  const waitStatus = (id: number, status: string) => until(`database ${id} ${status}`, async () => {
    const r = await ok('GET', `${MYSQL}/${id}`);
    if (r.status === 'failed') {
      const why = ((await ok('GET', '/v4/account/events?page_size=100')).data as { entity: { id: number } | null; status: string; message: string | null }[])
        .find((e) => e.entity?.id === id && e.status === 'failed');
      throw new Error(`database ${id} failed: ${why?.message ?? ''}`);
    }
    return r.status === status ? r : undefined;
  }, 600_000, 250);
  const credentials = async (id: number) => ({
    password: (await ok('GET', `${MYSQL}/${id}/credentials`)).password as string,
    ca: Buffer.from((await ok('GET', `${MYSQL}/${id}/ssl`)).ca_certificate, 'base64').toString('utf8'),
  });

  beforeAll(async () => {
    claims.push(await ownOctet(), await ownOctet());
    const [oa, ob] = claims.map((c) => c.octet) as [number, number];
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-storefork-'));
    // The store on the second block's address: nothing else of this host listens there.
    store = await startObjectStore({ host: `127.76.${ob}.1` });
    const url = `s3://${store.bucket}/us-east`;
    storeArgs = ['--backup-store', url, '--backup-store-endpoint', store.endpoint, '--backup-store-region', store.region, '--backup-store-path-style',
      '--backup-store-ca', store.caFile, '--backup-store-credentials', store.credentialsFile, '--binlog-archive-interval', String(ARCHIVE_S)];
    // The test's own reader of the store (manifests only: how far the source's archive reaches).
    reader = createS3Stores({ ...parseStoreUrl(url), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca, credentials: loadStoreCredentials(store.credentialsFile) });
    cp = await startControlPlane({ stateDir: join(dir, 'cp'), apiPort: 0, grpcPort: 0, databasePool: `127.78.${oa}.0/24`, logger: silentLogger(), rateLimits: testRateLimits });
    await enrolHost(cp, join(dir, 'dp'), 'dataplane', `storefork-dp-${oa}`, 'us-east');
    dataplane = await startDataplane({ controlPlane: cp.grpcAddress, stateDir: join(dir, 'dp'), logger: silentLogger(), endpointSource: `127.76.${oa}.1`, telemetryIntervalMs: 500 });
    agents = [{ id: `storefork-a-${oa}`, dir: join(dir, 'a'), net: `127.79.${oa}` }, { id: `storefork-b-${ob}`, dir: join(dir, 'b'), net: `127.79.${ob}` }];
    for (const a of agents) await enrolHost(cp, a.dir, 'agent', a.id, 'us-east');
    await Promise.all(agents.map(startAgent));
  }, 400_000);

  afterAll(async () => {
    for (const a of agents) {
      await a.proc?.kill();
      // Every node either agent ran (the source outlives its killed agent).
      const rt = createProcessRuntime({ root: join(a.dir, 'runtime'), logger: silentLogger() });
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      await rt.close();
    }
    reader?.close();
    await dataplane?.close();
    await cp?.close();
    await store?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true, maxRetries: 5 });
    for (const c of claims) await c.release();
  });

  it('forks to two seconds, placed on agent B from agent A\'s objects, hold exactly the rows stamped before each second', async () => {
    onTestFailed(() => console.log(agents.map((a) => `[agent ${a.id}]\n${a.proc?.output().slice(-5000)}`).join('\n')));
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data.find((a: { id: string }) => a.id === agents[0]!.id).engines);
    const created = await ok('POST', MYSQL, { label: 'storefork-src', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'] });
    const src = await waitStatus(created.id, 'active');
    // A is whichever agent the source's member runs on; B is the other one.
    const member = Object.keys(src.members)[0]!;
    const a = agents.find((x) => member.startsWith(`${x.net}.`))!;
    const b = agents.find((x) => x !== a)!;
    expect(a).toBeDefined();
    const { password, ca } = await credentials(src.id);
    const connectSrc = () => connectFrom({ source: CLIENT, host: src.hosts.primary, port: 3306, user: 'linroot', password, ca });
    // A value that every fork must hold and the store's files must not (they are encrypted).
    const marker = `storefork-plaintext-${randomBytes(8).toString('hex')}`;
    const c = await until('the source through hosts.primary', () => connectSrc().catch(() => undefined), 120_000, 500);
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c.query('CREATE TABLE app.marker (v VARCHAR(64) NOT NULL)');
    await c.query('INSERT INTO app.marker VALUES (?)', [marker]);
    await c.end();
    // The first archive round takes a base; only after it can a second be restored.
    const oldest = await until('an oldest_restore_time', async () => (await ok('GET', `${MYSQL}/${src.id}`)).oldest_restore_time as string | null || undefined, 180_000, 500);
    // An agent that does not run the source builds a fork from a logical backup of it in the store
    // (docs/agent.md, "Forks on another agent of the store"): a snapshot before the writes.
    await ok('POST', `${MYSQL}/${src.id}/backups`, { label: 'before_rows' });
    await until('the snapshot listed', async () => ((await ok('GET', `${MYSQL}/${src.id}/backups`)).data as { label: string }[]).some((x) => x.label === 'before_rows') || undefined, 180_000, 500);

    const began = Math.max(Date.now(), Date.parse(oldest));
    const writer = startRowWriter({ connect: connectSrc, onError: 'fail' });
    const sent: readonly WrittenRow[] = writer.rows;
    // Two whole seconds inside the writes, each with writes before and after it.
    const T1 = (Math.floor(began / 1000) + 2) * 1000;
    const T2 = T1 + 2000;
    await writer.waitFor(() => Date.now() >= T2 + 3000 && sent.some((r) => r.ackMs < T1) && sent.some((r) => r.sentMs >= T2), 120_000, 'writes past T2');
    await writer.stop();
    const expected = async (T: number) => {
      const s = await connectSrc();
      const [[want], [[all]]] = await Promise.all([
        s.query(`SELECT ${SUM} FROM app.t WHERE FLOOR(ts) * 1000 < ?`, [T]).then(([r]) => r as { n: number; c: string }[]),
        s.query('SELECT COUNT(*) AS n FROM app.t').then((r) => r as unknown as [{ n: number }[]]),
      ]);
      await s.end();
      expect(Number(want!.n)).toBeGreaterThan(0);
      expect(Number(want!.n)).toBeLessThan(Number(all!.n));
      return [Number(want!.n), String(want!.c)];
    };
    const want1 = await expected(T1);
    const want2 = await expected(T2);
    expect(want2[0]).toBeGreaterThan(want1[0] as number);

    // The source's archive in the store reaches past T2: a segment closed after every row sent
    // before T2 (and a second more) was acknowledged. Not "after the last write": the round that
    // closed the last segment may have run before the writer stopped, and a round with nothing new
    // closes none.
    const needed = Math.max(T2, ...sent.filter((r) => r.sentMs < T2 + 1000).map((r) => r.ackMs));
    await until('a segment closed after T2 in the store', async () => (await reader.segments.list(src.id)).some((s) => s.closedMs > needed) || undefined, 120_000, 500);
    // Agent A is SIGKILLed in the middle of an upload (16 MiB of random bytes: the archive's next
    // segment is a multipart upload of 8 MiB parts) and is gone (its source's server keeps running,
    // unreachable for the control plane): a fork now goes to another agent on the store. (Not a
    // snapshot's upload: the source would stay `backing_up`, which a fork's source may not be.)
    const big = await connectSrc();
    await big.query('CREATE TABLE app.big (id INT PRIMARY KEY, b LONGBLOB)');
    for (let i = 0; i < 16; i++) await big.query('INSERT INTO app.big VALUES (?, ?)', [i, randomBytes(1024 * 1024)]);
    await big.end();
    const unfinished = async () => [...(await reader.backups.unfinished(src.id)).map((n) => `backup ${n}`), ...(await reader.segments.unfinished(src.id)).map((n) => `segment ${n}`)];
    await until('an upload of agent A in flight', async () => (await unfinished()).length > 0 || undefined, 120_000, 100);
    await a.proc!.kill();
    // What the kill left (parts, or objects without their manifest) is listed by no agent.
    const left = await unfinished();
    expect(left.length).toBeGreaterThan(0);
    const listed = [...(await reader.backups.list(src.id)).map((m) => `backup ${m.id}`), ...(await reader.segments.list(src.id)).map((m) => `segment ${m.seq}`)];
    expect(listed.filter((x) => left.includes(x))).toEqual([]);
    await until(`agent ${a.id} away`, async () => !(await connected()).has(a.id) || undefined, 120_000, 250);

    const fork = async (label: string, T: number) => ok('POST', MYSQL, {
      label, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'],
      fork: { source: src.id, restore_time: new Date(T).toISOString().slice(0, 19) },
    });
    const made = [await fork('storefork-t1', T1), await fork('storefork-t2', T2)];
    const forks = await Promise.all(made.map((f) => waitStatus(f.id, 'active')));
    for (const [f, T, want] of [[forks[0], T1, want1], [forks[1], T2, want2]] as const) {
      // On agent B, which never ran the source.
      expect(Object.keys(f.members).every((ip) => ip.startsWith(`${b.net}.`)), JSON.stringify(f.members)).toBe(true);
      expect(f.fork).toMatchObject({ source: src.id, restore_time: new Date(T).toISOString().slice(0, 19) });
      const fc = await credentials(f.id);
      const conn = await until(`fork ${f.id} through hosts.primary`, () => connectFrom({ source: CLIENT, host: f.hosts.primary, port: 3306, user: 'linroot', ...fc }).catch(() => undefined), 120_000, 500);
      const [[got]] = await conn.query(`SELECT ${SUM} FROM app.t`) as unknown as [{ n: number; c: string }[]];
      const [ids] = await conn.query('SELECT id FROM app.t') as unknown as [{ id: number }[]];
      const [marks] = await conn.query('SELECT v FROM app.marker') as unknown as [{ v: string }[]];
      await conn.end();
      expect([Number(got!.n), String(got!.c)], `fork to ${new Date(T).toISOString()}`).toEqual(want);
      const have = new Set(ids.map((r) => Number(r.id)));
      expect(sent.filter((r) => r.ackMs < T && !have.has(r.id)).map((r) => r.id)).toEqual([]);
      expect(sent.filter((r) => r.sentMs >= T && have.has(r.id)).map((r) => r.id)).toEqual([]);
      expect(marks.map((m) => m.v)).toEqual([marker]);
    }
    expect(existsIn(join(b.dir, 'databases'), String(src.id))).toBe(false);

    // The objects the forks were built from are encrypted: no file of the store holds the marker.
    // (Also no half-written one: Swift keeps the uploaded parts as files too.)
    const files = readdirSync(store.devicesDir, { recursive: true, withFileTypes: true }).filter((f) => f.isFile()).map((f) => join(f.parentPath, f.name));
    expect(files.filter((f) => f.endsWith('.data')).length).toBeGreaterThan(0);
    expect(files.filter((f) => readFileSync(f).includes(marker))).toEqual([]);
    console.log(`[store-fork-elsewhere] source on ${a.id}, forks on ${b.id}: to ${new Date(T1).toISOString()} ${want1[0]} rows, to ${new Date(T2).toISOString()} ${want2[0]} rows (of ${sent.length} written); agent A killed with ${left.join(", ")} unfinished in the store`);
  }, 900_000);
});

function existsIn(folder: string, name: string): boolean {
  try {
    return readdirSync(folder).includes(name);
  } catch {
    return false;
  }
}
