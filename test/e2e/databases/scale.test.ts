// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { assertCurrentDatabase } from '../../helpers/database-schema.js';
import { DEFAULT_SERIES, engineOfSeries, serverVersion, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, until, waitStatus, type DbLab } from './db-lab.js';

/**
 * Scaling through PUT `cluster_size` on real servers run by a `fulcrum agent` process (process
 * runtime; docs/databases.md, "Scaling"): a 1-node database with rows, written to all along
 * through hosts.primary, goes to 3 nodes (the new replicas seeded from the primary, replication
 * on) and back to 1, each time `resizing` then `active` with a finished `database_resize` event;
 * every acknowledged row is on every member and hosts.primary never changes.
 */
describe('cluster_size 1 -> 3 -> 1 (process runtime)', () => {
  let lab: DbLab;
  let db: any;
  let password = '';
  let ca = '';
  let hostPrimary = '';
  const source = `127.65.${10 + Math.floor(Math.random() * 200)}.3`;
  const acked: number[] = [];
  let stopped = false;
  let writer: Promise<void> | undefined;
  let scales = 0;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const primary = () => connectFrom({ source, host: hostPrimary, port: 3306, user: 'linroot', password, ca });
  /** The ids on each member, straight to the node (its certificate names its address). */
  const idsOnEachMember = async () => {
    const d = await ok('GET', `${MYSQL}/${db.id}`);
    const out: Record<string, Set<number>> = {};
    for (const address of Object.keys(d.members)) {
      const c = await mysql.createConnection({ host: address, port: 3306, user: 'linroot', password, connectTimeout: 3000, ssl: { ca, rejectUnauthorized: true } });
      try {
        out[address] = new Set(((await c.query('SELECT id FROM app.t'))[0] as any[]).map((r) => Number(r.id)));
      } finally {
        await c.end();
      }
    }
    return out;
  };
  /** Waits until every member holds every row acknowledged so far. */
  const everyRowOnEveryMember = async (members: number) => {
    const want = [...acked];
    return until(`every acknowledged row on ${members} members`, async () => {
      const x = await idsOnEachMember().catch(() => undefined);
      if (!x || Object.keys(x).length !== members) return undefined;
      return Object.values(x).every((ids) => want.every((id) => ids.has(id))) ? x : undefined;
    }, 60_000, 500);
  };
  /** The members the store keeps a node report of (database_member_reports). */
  const reportedMembers = async () => (await lab.cp.context.store.databases.memberReports(db.id)).map((r) => r.member);
  const scaleTo = async (size: 1 | 3) => {
    const before = acked.length;
    const put = await ok('PUT', `${MYSQL}/${db.id}`, { cluster_size: size });
    expect(put).toMatchObject({ status: 'resizing', cluster_size: size, replication_type: size === 3 ? 'semi_synch' : 'none' });
    assertCurrentDatabase(put);
    db = await waitStatus(lab, db.id, 'active', 300_000);
    // The writer goes on through the same address afterwards.
    await until('writes acknowledged after the scale', async () => acked.length >= before + 10 || undefined, 60_000, 100);
    expect(db).toMatchObject({ cluster_size: size });
    expect(db.hosts.primary).toBe(hostPrimary);
    // One event per scale, finished: a second one would read as a second resize.
    scales++;
    const events = (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.action === 'database_resize' && e.entity?.id === db.id);
    expect(events.map((e: any) => e.status)).toEqual(Array(scales).fill('finished'));
  };

  beforeAll(async () => {
    lab = await startDbLab('dsc-scale', 'process');
    await lab.startAgent();
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, DEFAULT_SERIES);
    const created = await ok('POST', MYSQL, { label: 'dsc-scale', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'] });
    db = await waitStatus(lab, created.id, 'active', 180_000);
    hostPrimary = db.hosts.primary;
    password = (await ok('GET', `${MYSQL}/${db.id}/credentials`)).password;
    ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    const c = await primary();
    expect(db.version).toMatch(seriesPattern(DEFAULT_SERIES));
    expect(await serverVersion(c)).toMatch(seriesPattern(DEFAULT_SERIES));
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(64) NOT NULL)');
    // Rows from before the scale, so the seed has data to copy and not only the binlog.
    for (let id = 1; id <= 200; id++) await c.query('INSERT INTO app.t VALUES (?, ?)', [id, `row ${id}`]);
    acked.push(...Array.from({ length: 200 }, (_, i) => i + 1));
    await c.end();
    let conn: mysql.Connection | undefined;
    writer = (async () => {
      for (let id = 1_000; !stopped; id++) {
        const t0 = Date.now();
        try {
          conn ??= await primary();
          await conn.query('INSERT INTO app.t VALUES (?, ?)', [id, 'loop']);
          acked.push(id);
        } catch {
          conn?.destroy();
          conn = undefined;
        }
        await new Promise((r) => setTimeout(r, Math.max(0, 100 - (Date.now() - t0))));
      }
      await conn?.end().catch(() => undefined);
    })();
  }, 240_000);
  afterAll(async () => {
    stopped = true;
    await writer;
    await lab?.close();
  });

  it('acceptance 2: scaled to 3 nodes, every row is on every member and hosts.primary is the same', async () => {
    onTestFailed(() => console.log(`agent output:\n${lab.output()}`));
    await scaleTo(3);
    expect(Object.values(db.members).sort()).toEqual(['failover', 'failover', 'primary']);
    await until('a node report of each of 3 members', async () => (await reportedMembers()).join() === '1,2,3' || undefined, 60_000, 200);
    expect(db.hosts.secondary).toBeTruthy();
    await everyRowOnEveryMember(3);
    const nodes = (await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`) && n.state === 'running');
    expect(nodes).toHaveLength(3);
  }, 360_000);

  it('acceptance 2: scaled back to 1 node, the primary keeps every row and hosts.primary is the same', async () => {
    onTestFailed(() => console.log(`agent output:\n${lab.output()}`));
    await scaleTo(1);
    expect(Object.values(db.members)).toEqual(['primary']);
    // The reports of members 2 and 3 went with the scale (docs/databases.md, "Scaling").
    expect(await reportedMembers()).toEqual([1]);
    const nodes = (await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`));
    expect(nodes).toHaveLength(1);
    stopped = true;
    await writer;
    await everyRowOnEveryMember(1);
    // And through the endpoint clients use.
    const c = await primary();
    try {
      const [rows] = await c.query('SELECT COUNT(*) AS n FROM app.t');
      expect(Number((rows as any[])[0].n)).toBeGreaterThanOrEqual(acked.length);
      await c.query('INSERT INTO app.t VALUES (?, ?)', [999, 'after']);
    } finally {
      await c.end();
    }
  }, 360_000);
});
