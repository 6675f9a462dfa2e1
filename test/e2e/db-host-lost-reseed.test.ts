// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its object store on its own bridge address).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { createS3Stores, loadStoreCredentials, parseStoreUrl } from '../../agent/backup/s3-store.js';
import { purgePrimaryBinlog } from '../helpers/binlog-purge.js';
import { until } from '../helpers/lab.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, mysqlClient } from '../helpers/fleet-clients.js';

// A member of a spread cluster re-placed after its host is lost, when the primary no longer has
// its whole binlog (docs/multi-host.md, "A lost host"): four agent hosts share one real object
// store (Swift + s3api over TLS). A 3-node database gets rows, its primary's archive takes a
// physical base, more rows are written, and the primary's binlogs are purged, so replaying them
// from the first GTID cannot rebuild a member. A replica's host is declared lost: its member is
// re-placed on the fourth host and seeded from the store's physical base, then replicates from
// the base's position. The host is lost right after the purge, so the newest base may still be
// one the purged binlog was needed after: that try fails (reported), the primary's archive takes a
// newer base as its binlog now begins after the old one's position, and the next try seeds from
// it. The new member holds the primary's rows (count and checksum) and the database is active with
// three members on three hosts.

const PREFIX = 'mrs';
const SUBNET = 233;
const NB_POOL = '198.18.232.0/24';
const DB_POOL = '198.18.233.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.234.0/29', ag2: '198.18.234.8/29', ag3: '198.18.234.16/29', ag4: '198.18.234.24/29' };
const ARCHIVE_S = 3;
const SUM = 'SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(id)), 0) AS c FROM fh.t';

describe('a spread member re-placed after a host loss, the primary\'s binlog purged', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, store: { archiveS: ARCHIVE_S } });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('seeds the new member from the store\'s physical base: the primary\'s rows, active with three members on three hosts', async () => {
    const { fleet, agents, dir, cl, hostOf, store } = f;
    const { call, procs } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const reader = createS3Stores({
      ...parseStoreUrl(`s3://${store!.bucket}/us-east`), endpoint: store!.endpoint, region: store!.region, pathStyle: true, ca: store!.ca,
      credentials: loadStoreCredentials(store!.credentialsFile),
    });
    try {
      const { id, db, oldPrimary, client, loop } = await spreadUnderWrites(f, 'mrs-reseed');
      const primaryHost = hostOf(oldPrimary)!;
      const replica = Object.keys(db.members).find((m) => m !== oldPrimary)!;
      const lost = hostOf(replica)!;
      const spare = agents.find((h) => !Object.keys(db.members).some((m) => hostOf(m) === h))!;

      // Rows, a physical base of the database in the store, more rows after it.
      await until('rows written', () => attempts(loop).filter((a) => a.ok).length >= 10, 120_000, 200);
      const base = await until('a physical base in the store', async () => (await reader.backups.list(id))
        .find((m) => m.type === 'base' && m.format.startsWith('mariadb-backup')), 300_000, 1000);
      const before = attempts(loop).filter((a) => a.ok).length;
      await until('rows written after the base', () => attempts(loop).filter((a) => a.ok).length >= before + 10, 120_000, 200);
      await loop.kill();

      // The primary's binlog no longer starts at the first GTID: replaying it cannot seed a member.
      expect(await purgePrimaryBinlog(dir, primaryHost.name, id)).toMatch(/^0-\d+-\d+/);
      const want = (await until('the primary\'s rows', () => client.sql(SUM), 60_000, 1000))[0];
      expect(Number(want.n)).toBeGreaterThanOrEqual(20);

      // A replica's host is cut off and declared lost: its member goes to the spare host.
      await lost.linkDown();
      const declared = await call('POST', `/v4/fulcrum/agents/${lost.name}/lost`);
      expect(declared.status, JSON.stringify(declared.body)).toBe(200);
      // Code that cannot seed a member across hosts without the whole binlog says so: the wait ends
      // at once with the agent's reason rather than at its deadline (until() retries on a throw).
      const notSeeded = () => /[^\n]*seeding across hosts from a dump is not built[^\n]*/.exec(procs[spare.name]?.output() ?? '')?.[0]?.slice(0, 600);
      const outcome = await until('the new member seeded from a physical base', async () => {
        const why = notSeeded();
        if (why) return { why };
        const event = ((await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[])
          .find((e) => e.entity?.id === id && /(rebuilt|seeded) from physical base \d+ in the object store/.test(e.message ?? ''));
        return event ? { event } : undefined;
      }, 600_000, 1000);
      if ('why' in outcome) throw new Error(`the new member was not seeded: ${outcome.why}`);
      const seeded = outcome.event;
      const healed = await until('three members on three other hosts', async () => {
        const r = await call('GET', `${MYSQL}/${id}`);
        const m = Object.keys(r.body.members ?? {});
        const on = new Set(m.map((x) => hostOf(x)?.name));
        return m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name) ? r.body : undefined;
      }, 600_000, 1000);
      const newMember = Object.keys(healed.members).find((m) => hostOf(m) === spare)!;

      // The new member holds exactly the primary's rows.
      const direct = await mysqlClient(call, cl, id, newMember);
      const got = await until('the primary\'s rows on the new member', async () => {
        const r = (await direct.sql(SUM))?.[0];
        return r && Number(r.n) === Number(want.n) ? r : undefined;
      }, 120_000, 1000);
      expect(got).toEqual(want);
      const active = await until('active with three members, the new one a replica', async () => {
        const r = await call('GET', `${MYSQL}/${id}`);
        return r.body.status === 'active' && Object.keys(r.body.members ?? {}).length === 3 && r.body.members[newMember] === 'failover' ? r.body : undefined;
      }, 120_000, 1000);
      expect(Object.values(active.members).filter((r) => r === 'primary')).toHaveLength(1);
      console.log(`[db-host-lost-reseed] ${want.n} rows; the first base was ${base.id}; ${seeded.message}`);
    } finally {
      reader.close();
    }
  }, 1_200_000);
});
