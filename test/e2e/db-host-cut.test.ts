// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { until } from '../helpers/lab.js';
import { createHosts, leftovers, type Host, type HostNet } from '../helpers/hosts.js';
import { MYSQL, attempts, engineOf, holderOf, listensOn, mysqlClient, sixOf, startFleet, waitActive, type Fleet } from '../helpers/fleet-hosts.js';

// A database host cut off the network (docs/databases.md, "Clusters across hosts"): a 3-node
// semi_synch cluster spread over three agent hosts, written from a client host through
// hosts.primary (a data plane pair). The primary's host loses its link during the write loop:
// the control plane names another member primary, writes resume through the same hosts.primary,
// no acknowledged row is lost, and a write tried on the isolated old primary is not acknowledged
// (semi-sync without fallback). When the link returns the old primary rejoins as a replica of the
// higher term; the write only it had is reported as an errant transaction (API event, its binlog
// events kept in a 0600 file), and the database is active with three members. Nothing is left.

const PREFIX = 'msp';
const SUBNET = 171;
const NB_POOL = '198.18.170.0/24';
const DB_POOL = '198.18.171.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.172.0/29', ag2: '198.18.172.8/29', ag3: '198.18.172.16/29' };
/** The id the test writes on the isolated old primary (the loop's ids stay far below it). */
const ISOLATED_ID = 900_000;

describe('a database host cut off the network', () => {
  let net: HostNet;
  let dir: string;
  let fleet: Fleet;
  let dpa: Host, dpb: Host, cl: Host;
  let agents: Host[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-msp-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag1', 'ag2', 'ag3', 'cl'] });
    const [cpHost, a, b, ag1, ag2, ag3, c] = net.hosts as [Host, Host, Host, Host, Host, Host, Host];
    [dpa, dpb, cl, agents] = [a, b, c, [ag1, ag2, ag3]];
    fleet = await startFleet({ cpHost, dir, nbPool: NB_POOL, dbPool: DB_POOL });
    await fleet.dataplane(dpa, [dpb], 150);
    await fleet.dataplane(dpb, [dpa], 100);
    for (const h of agents) await fleet.agent(h, NODE_POOLS[h.name]!, sixOf(NODE_POOLS[h.name]!));
  }, 300_000);

  afterAll(async () => {
    await fleet?.stopAll();
    await net?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('fails over within 15 s, loses no acknowledged row, lets the isolated primary acknowledge nothing, and takes it back as a replica with its errant write reported', async () => {
    const { call, procs } = fleet;
    onTestFailed(() => console.log(`[control plane output]\n${fleet.cp.output().slice(-6000)}\n[agents]\n${agents.map((h) => `-- ${h.name}\n${procs[h.name]?.output().slice(-3000)}`).join('\n')}`));
    await until('three agents that run members across hosts', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { connected: boolean; membersAcrossHosts: boolean }[]).filter((a) => a.connected && a.membersAcrossHosts).length === 3;
    }, 120_000, 500);
    const created = await call('POST', MYSQL, {
      label: 'msp-cut', region: 'us-east', type: 'g6-nanode-1', engine: await engineOf(fleet, agents[0]!), cluster_size: 3, replication_type: 'semi_synch', allow_list: [`${cl.ip}/32`],
    });
    expect(created.status).toBe(200);
    const id: number = created.body.id;
    await waitActive(fleet, id, 600_000, () => agents.map((h) => procs[h.name]!.output().slice(-2000)).join('\n'));
    const hostOf = (ip: string) => agents.find((h) => sixOf(NODE_POOLS[h.name]!).includes(ip));
    const db = await until('three members on three hosts', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body.members ?? {});
      return m.length === 3 && new Set(m.map((x) => hostOf(x)?.name)).size === 3 ? r.body : undefined;
    }, 60_000, 500);
    const oldPrimary = Object.keys(db.members).find((m) => db.members[m] === 'primary')!;
    const cut = hostOf(oldPrimary)!;
    const primary: string = db.hosts.primary;
    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    await holderOf(dpa, dpb, primary);
    const client = await mysqlClient(call, cl, id, primary);
    await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);

    const loop = client.loop();
    await until('writes through hosts.primary', () => attempts(loop).filter((a) => a.ok).length >= 5, 60_000, 100);

    // The old primary's host loses its link.
    const cutAt = Date.now();
    await cut.linkDown();

    // A write on the isolated old primary (over its Unix socket, as the agent's root) is not
    // acknowledged: no replica can acknowledge it, and semi-sync never falls back.
    const isolated = await isolatedWrite(join(dir, cut.name), id);
    console.log(`[db-host-cut] write on the isolated old primary: ${isolated}`);
    expect(isolated).toBe('not acknowledged');

    const first = await until('a write begun after the cut succeeds', () => attempts(loop).find((a) => a.start > cutAt && a.ok), 60_000, 100);
    const gap = first.end - cutAt;
    const failed = attempts(loop).filter((a) => a.start > cutAt - 4000 && a.start < first.start && !a.ok);
    console.log(`[db-host-cut] primary's host ${cut.name} cut: writes through hosts.primary succeeded again after ${gap} ms (${failed.length} failed attempts: ${[...new Set(failed.map((a) => a.err))].join(', ')})`);
    expect(gap).toBeLessThan(15_000);
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    const during = await call('GET', `${MYSQL}/${id}`);
    expect(during.body.members[oldPrimary]).not.toBe('primary');

    // The link returns: the old primary rejoins as a replica of the higher term.
    await cut.linkUp();
    const healed = await until('active with three members, the old primary a replica', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      return r.body.status === 'active' && Object.keys(r.body.members ?? {}).length === 3 && r.body.members[oldPrimary] === 'failover' ? r.body : undefined;
    }, 300_000, 1000);
    expect(Object.values(healed.members).filter((r) => r === 'primary')).toHaveLength(1);
    await loop.kill();

    // No acknowledged row is lost; the unacknowledged write of the isolated primary is not in the
    // database, but reported with its GTID and kept in a 0600 file on its host's agent.
    const acked = attempts(loop).filter((a) => a.ok).map((a) => a.id);
    const rows = await until('the rows read back', () => client.sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    const stored = new Set((rows as { id: number }[]).map((r) => r.id));
    expect(acked.length).toBeGreaterThan(5);
    expect(acked.filter((i) => !stored.has(i))).toEqual([]);
    expect(stored.has(ISOLATED_ID)).toBe(false);
    const errant = await until('the errant transaction reported in the API events', async () => {
      const r = await call('GET', '/v4/account/events?page_size=100');
      return (r.body.data as { action: string; status: string; message: string | null; entity: { id: number } | null }[])
        .find((e) => e.action === 'database_failover' && e.status === 'failed' && e.entity?.id === id && /errant transactions/.test(e.message ?? ''));
    }, 120_000, 1000);
    console.log(`[db-host-cut] ${errant.message}`);
    const errantDir = join(dir, cut.name, 'databases', String(id), 'errant');
    const files = await until('the errant binlog events kept', () => {
      try {
        const f = readdirSync(errantDir);
        return f.length > 0 ? f : undefined;
      } catch {
        return undefined;
      }
    }, 60_000, 500);
    expect(statSync(join(errantDir, files[0]!)).mode & 0o777).toBe(0o600);
    expect(readFileSync(join(errantDir, files[0]!), 'utf8')).toContain(String(ISOLATED_ID));

    await fleet.stopAll();
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_200_000);
});

/**
 * Inserts ISOLATED_ID on the database's member running on the agent whose state is `agentState`
 * (its only member there), over the member's Unix socket as the agent's root, and waits 8 s.
 */
async function isolatedWrite(agentState: string, id: number): Promise<string> {
  const nodes = join(agentState, 'runtime', 'nodes');
  const name = readdirSync(nodes).find((n) => n.includes(`-db${id}-n`))!;
  const state = JSON.parse(readFileSync(join(agentState, 'databases', String(id), 'state.json'), 'utf8')) as { adminPassword: string };
  const c = await mysql.createConnection({ socketPath: join(nodes, name, 'run', 'mysqld.sock'), user: 'root', password: state.adminPassword });
  try {
    const outcome = await Promise.race([
      c.query('INSERT INTO fh.t (id) VALUES (?)', [ISOLATED_ID]).then(() => 'acknowledged', (e: Error) => `refused: ${e.message}`),
      new Promise<string>((ok) => setTimeout(() => ok('not acknowledged'), 8000)),
    ]);
    return outcome;
  } finally {
    c.destroy();
  }
}
