// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { purgePrimaryBinlog } from '../helpers/binlog-purge.js';
import { until } from '../helpers/lab.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, lostRows, mysqlClient } from '../helpers/fleet-clients.js';

// A member of a spread cluster re-placed after its host is lost, on agents whose backups go to
// local folders (the default: no shared store, so no physical base), when the primary has purged
// its binlog, so replaying it from the first GTID cannot seed a member either (docs/multi-host.md,
// "How a new member is seeded"). The new member is seeded with a consistent copy of the primary
// taken over TLS while the write loop keeps writing, catches up, and holds every row of the
// primary (count and checksum, also of a bulk table that makes the copy take a while); the
// database is active with three members on three hosts and no acknowledged write is lost.

const PREFIX = 'mds';
const SUBNET = 237;
const NB_POOL = '198.18.236.0/24';
const DB_POOL = '198.18.237.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.238.0/29', ag2: '198.18.238.8/29', ag3: '198.18.238.16/29', ag4: '198.18.238.24/29' };
const BULK_ROWS = 60_000;
const SUM = 'SELECT (SELECT COUNT(*) FROM fh.t) AS n, (SELECT COALESCE(SUM(CRC32(id)), 0) FROM fh.t) AS c, (SELECT COUNT(*) FROM fh.big) AS bn, (SELECT COALESCE(SUM(CRC32(CONCAT(id, pad))), 0) FROM fh.big) AS bc';

describe('a spread member re-placed after a host loss, no shared store, the primary\'s binlog purged', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('seeds the new member with a consistent copy of the primary over TLS while writes go on: every row, active with three members on three hosts', async () => {
    const { fleet, agents, dir, cl, hostOf } = f;
    const { call } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const { id, db, oldPrimary, client, loop } = await spreadUnderWrites(f, 'mds-copy');
    const primaryHost = hostOf(oldPrimary)!;
    const replica = Object.keys(db.members).find((m) => m !== oldPrimary)!;
    const lost = hostOf(replica)!;
    const spare = agents.find((h) => !Object.keys(db.members).some((m) => hostOf(m) === h))!;

    // A bulk table (about 60 MB), so that the copy runs for a while under the write loop.
    const bulk = await client.sql('CREATE TABLE fh.big (id INT PRIMARY KEY, pad VARCHAR(1000) NOT NULL)',
      `INSERT INTO fh.big SELECT seq, REPEAT(MD5(seq), 31) FROM fh.seq_1_to_${BULK_ROWS}`, 'SELECT COUNT(*) AS n FROM fh.big');
    expect(Number(bulk?.[0]?.n)).toBe(BULK_ROWS);
    await until('rows written', () => attempts(loop).filter((a) => a.ok).length >= 20, 120_000, 200);

    // The primary's binlog no longer starts at the first GTID: replaying it cannot seed a member.
    expect(await purgePrimaryBinlog(dir, primaryHost.name, id)).toMatch(/^0-\d+-\d+/);

    // A replica's host is cut off and declared lost, with the write loop still running: its member
    // goes to the spare host, which has no base to start from and cannot replay the binlog.
    const cutAt = Date.now();
    await lost.linkDown();
    const declared = await call('POST', `/v4/fulcrum/agents/${lost.name}/lost`);
    expect(declared.status, JSON.stringify(declared.body)).toBe(200);
    type Event = { action: string; message: string | null; status: string | null; entity: { id: number } | null };
    const events = async () => ((await call('GET', '/v4/account/events?page_size=100')).body.data as Event[]).filter((e) => e.entity?.id === id);
    // Code that cannot copy the primary says so at once: a failed event that names no failed copy
    // (a copy that failed midway is retried) ends the wait with the agent's reason.
    const outcome = await until('the new member seeded with a copy of the primary', async () => {
      const mine = await events();
      const seeded = mine.find((e) => /(rebuilt|seeded) from a consistent copy of the primary over TLS/.test(e.message ?? ''));
      if (seeded) return { seeded };
      const why = mine.find((e) => /cannot be seeded/.test(e.message ?? '') && !/copying the primary failed/.test(e.message ?? ''));
      return why ? { why: why.message } : undefined;
    }, 600_000, 1000);
    if (!('seeded' in outcome)) throw new Error(`the new member was not seeded: ${outcome.why}`);
    const seeded = outcome.seeded!;
    // Writes acknowledged between the cut and the seeded event: the copy ran in that time.
    const seenAt = Date.now();
    const writesDuringCopy = attempts(loop).filter((a) => a.ok && a.start > cutAt && a.end < seenAt).length;
    const healed = await until('active with three members on three other hosts', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body.members ?? {});
      const on = new Set(m.map((x) => hostOf(x)?.name));
      return r.body.status === 'active' && m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name) ? r.body : undefined;
    }, 600_000, 1000);
    const healedMs = Date.now() - cutAt;
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    await loop.kill();
    expect(writesDuringCopy).toBeGreaterThan(0);

    // No acknowledged row lost; the new member holds exactly the primary's rows.
    const { acked, missing, stored } = await lostRows(client, loop);
    expect(missing).toEqual([]);
    const want = (await until('the primary\'s rows', () => client.sql(SUM), 60_000, 1000))[0];
    expect(Number(want.n)).toBe(stored.size);
    expect(Number(want.bn)).toBe(BULK_ROWS);
    const newMember = Object.keys(healed.members).find((m) => hostOf(m) === spare)!;
    const direct = await mysqlClient(call, cl, id, newMember);
    const got = await until('the primary\'s rows on the new member', async () => {
      const r = (await direct.sql(SUM))?.[0];
      return r && Number(r.n) === Number(want.n) ? r : undefined;
    }, 120_000, 1000);
    expect(got).toEqual(want);
    // On a loaded machine the primary's agent may miss its heartbeats and the control plane fail
    // over; the new member may then be the one promoted, once it has caught up (it holds every row).
    expect(['failover', 'primary']).toContain(healed.members[newMember]);
    expect(Object.values(healed.members).filter((r) => r === 'primary')).toHaveLength(1);
    // Customer access works on the new member as on its peers (linroot made from the desired state).
    expect((await direct.sql('SELECT 1 AS one'))?.[0]?.one).toBe(1);
    const failedWays = (await events()).filter((e) => /cannot be seeded/.test(e.message ?? ''));
    const roles = Object.entries(healed.members).map(([m, r]) => `${hostOf(m)!.name}=${String(r)}`).join(' ');
    console.log(`[db-host-lost-copyseed] roles ${roles}; ${stored.size} acknowledged rows (${acked.length} acks, ${writesDuringCopy} after the cut) + ${BULK_ROWS} bulk rows; ${seeded.message}; active with three members ${healedMs} ms after the cut; failed seed events: ${failedWays.map((e) => e.message).join(' | ') || 'none'}`);
  }, 1_200_000);
});
