// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks, temp folders, containers named from its own agent).
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { repoRoot } from '../../helpers/lab.js';
import { MYSQL, connectFrom, startDbLab, until, waitStatus, type DbLab } from './db-lab.js';

const run = promisify(execFile);
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
const REPO = process.env.FULCRUM_MYSQL_IMAGE ?? 'fulcrum/mariadb';

/** Builds an image of the series when this host has none yet (a fresh CI machine). */
async function ensureImage(series: string, args: string[]): Promise<void> {
  if (await docker.getImage(`${REPO}:${series}`).inspect().then(() => true, () => false)) return;
  try {
    await run('bash', ['scripts/build-mysql-image.sh', ...args], { cwd: repoRoot, timeout: 900_000 });
  } catch (e) {
    throw new Error(`scripts/build-mysql-image.sh ${args.join(' ')} failed; the upgrade test needs it:\n${(e as { stderr?: string }).stderr ?? (e as Error).message}`);
  }
}

/**
 * A version upgrade across real MariaDB series (docs/databases.md, "Resize and upgrade"): a
 * 3-node database on the docker runtime, built from the lab's 10.11 image, is moved to the 11.8
 * image (scripts/build-mysql-image.sh --suite trixie) with `PUT {version: "11.8"}` while a client
 * writes a row every 100 ms through hosts.primary. Replicas go first, then a switchover, then the
 * old primary; every member then runs 11.8, no acknowledged row is missing and the writes paused
 * for at most 15 s.
 */
describe('version upgrade 10.11 -> 11.8 on 3 nodes under writes (docker runtime)', () => {
  let lab: DbLab;
  let db: any;
  let password = '';
  let ca = '';
  let newer = '';
  // A source address of this test's own (all of 127/8 is local).
  const source = `127.65.${10 + Math.floor(Math.random() * 200)}.2`;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const primary = () => connectFrom({ source, host: db.hosts.primary, port: 3306, user: 'linroot', password, ca });
  /** A query on each member, straight to the node (its certificate names its address). */
  const onEachMember = async (sql: string) => {
    const d = await ok('GET', `${MYSQL}/${db.id}`);
    const out: Record<string, any[]> = {};
    for (const address of Object.keys(d.members)) {
      const c = await mysql.createConnection({ host: address, port: 3306, user: 'linroot', password, connectTimeout: 3000, ssl: { ca, rejectUnauthorized: true } });
      try {
        out[address] = (await c.query(sql))[0] as any[];
      } finally {
        await c.end();
      }
    }
    return out;
  };

  beforeAll(async () => {
    if (!(await docker.ping().then(() => true, () => false))) await run('bash', ['scripts/start-dockerd.sh'], { cwd: repoRoot, timeout: 120_000 });
    await ensureImage('10.11', []);
    await ensureImage('11.8', ['--suite', 'trixie']);
    lab = await startDbLab('dsc-upgrade', 'docker');
    await lab.startAgent();
    const engines: { id: string; version: string }[] = (await ok('GET', '/v4/fulcrum/agents')).data[0].engines;
    const older = engines.find((e) => e.version.startsWith('10.11.'))!;
    newer = engines.find((e) => e.version.startsWith('11.8.'))?.id ?? '';
    expect(older, JSON.stringify(engines)).toBeDefined();
    const created = await ok('POST', MYSQL, { label: 'dsc-upgrade', region: 'us-east', type: 'g6-nanode-1', engine: older.id, cluster_size: 3, allow_list: ['0.0.0.0/0'] });
    db = await waitStatus(lab, created.id, 'active', 240_000);
    password = (await ok('GET', `${MYSQL}/${db.id}/credentials`)).password;
    ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    const c = await primary();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, at BIGINT NOT NULL)');
    await c.end();
  }, 1_200_000);
  afterAll(async () => {
    await lab?.close();
  });

  it('offers 11.8 where an agent can run it: the docker agent with the image', async () => {
    expect(newer).toMatch(/^mysql\/11\.8\.\d+$/);
    const listed = (await ok('GET', '/v4/databases/engines')).data.map((e: any) => e.id);
    expect(listed).toContain(newer);
  });

  it('acceptance 2: the upgrade loses no acknowledged row, pauses writes at most 15 s, and every member runs 11.8', async () => {
    onTestFailed(() => console.log(`agent output:\n${lab.output()}`));
    const acked: { id: number; at: number }[] = [];
    let stopped = false;
    let conn: mysql.Connection | undefined;
    const writer = (async () => {
      for (let id = 1; !stopped; id++) {
        const t0 = Date.now();
        try {
          conn ??= await primary();
          await conn.query('INSERT INTO app.t VALUES (?, ?)', [id, t0]);
          acked.push({ id, at: Date.now() });
        } catch {
          conn?.destroy();
          conn = undefined;
        }
        await new Promise((r) => setTimeout(r, Math.max(0, 100 - (Date.now() - t0))));
      }
    })();
    try {
      await until('writes acknowledged before the upgrade', async () => acked.length >= 20 || undefined, 30_000, 100);
      const put = await lab.api('PUT', `${MYSQL}/${db.id}`, { version: '11.8' });
      expect(put.status, JSON.stringify(put.body)).toBe(200);
      expect(put.body).toMatchObject({ status: 'updating', version: newer.split('/')[1] });
      db = await waitStatus(lab, db.id, 'active', 900_000);
      const n = acked.length;
      await until('writes acknowledged after the upgrade', async () => acked.length >= n + 20 || undefined, 60_000, 100);
    } finally {
      stopped = true;
      await writer;
      await conn?.end().catch(() => undefined);
    }
    // The longest stretch without an acknowledged write, from the first to the last one.
    let longest = 0;
    let from = 0;
    for (let i = 1; i < acked.length; i++) {
      const gap = acked[i]!.at - acked[i - 1]!.at;
      if (gap > longest) [longest, from] = [gap, acked[i - 1]!.at];
    }
    console.log(`upgrade 10.11 -> 11.8 under writes: ${acked.length} rows acknowledged, longest write pause ${longest} ms (from ${new Date(from).toISOString()})`);
    expect(longest).toBeLessThanOrEqual(15_000);

    const versions = await onEachMember('SELECT VERSION() AS v');
    expect(Object.keys(versions)).toHaveLength(3);
    for (const [address, rows] of Object.entries(versions)) expect(String(rows[0].v), address).toMatch(/^11\.8\.\d+-MariaDB/);
    expect(Object.values(db.members).sort()).toEqual(['failover', 'failover', 'primary']);
    expect(db.version).toMatch(/^11\.8\.\d+$/);

    const c = await primary();
    try {
      const [rows] = await c.query('SELECT id FROM app.t');
      const have = new Set((rows as any[]).map((r) => Number(r.id)));
      const lost = acked.filter((a) => !have.has(a.id)).map((a) => a.id);
      expect(lost).toEqual([]);
    } finally {
      await c.end();
    }
    // Every replica holds every acknowledged row too.
    const counts = await until('replicas caught up', async () => {
      const x = await onEachMember('SELECT COUNT(*) AS n FROM app.t');
      return Object.values(x).every((r) => Number(r[0].n) >= acked.length) ? x : undefined;
    }, 30_000, 500);
    expect(Object.keys(counts)).toHaveLength(3);
    const events = (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.action === 'database_update' && e.entity?.id === db.id);
    expect(events[0]).toMatchObject({ status: 'finished' });
  }, 1_200_000);
});
