// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { until } from '../helpers/lab.js';
import { leftovers } from '../helpers/hosts.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, lostRows } from '../helpers/fleet-clients.js';

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
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('fails over within 15 s, loses no acknowledged row, lets the isolated primary acknowledge nothing, and takes it back as a replica with its errant write reported', async () => {
    const { fleet, dir, hostOf } = f;
    const { call } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const { id, oldPrimary, client, loop } = await spreadUnderWrites(f, 'msp-cut');
    const cut = hostOf(oldPrimary)!;

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
    const { acked, missing, stored } = await lostRows(client, loop);
    expect(acked.length).toBeGreaterThan(5);
    expect(missing).toEqual([]);
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

    await f.close();
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
