// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its object store on its own bridge address).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { leftovers } from '../helpers/hosts.js';
import { MYSQL, fulcrumCli, singleUnderWrites, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, longestPause, lostRows } from '../helpers/fleet-clients.js';

// Draining an agent host (docs/multi-host.md, "Draining a host"): four agent hosts on one real
// object store (Swift + s3api over TLS), a data plane pair serving each database's hosts.primary,
// a client host writing to each. One host holds the primary of a 3-node semi_synch database (a),
// a 1-node database (c) and a replica of another 3-node database (b), all three under write loops.
// Placement puts them there because the fourth host is draining while they are created: nothing
// new goes to it (it is the least loaded, so placement would pick it otherwise), and a drain of
// the first host is refused then (a and b would have nowhere to go). Once the fourth host is
// undrained, `POST /v4/fulcrum/agents/:id/drain` moves everything off the first: b's replica is
// re-placed, a's primary switched over (fence, catch-up, new term) and then moved as a replica,
// and c fenced read-only, its binlog shipped to the store and rebuilt on another host from it
// with the same hosts.primary and credentials. All end active off the drained host with no
// acknowledged row lost; the longest pause between acknowledged writes of each is printed. The
// old host removed c's node but kept its objects in the store. A drain of another host is then
// refused (from the API and the CLI). Nothing is left.

const PREFIX = 'mdr';
const SUBNET = 213;
const NB_POOL = '198.18.212.0/24';
const DB_POOL = '198.18.213.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.214.0/29', ag2: '198.18.214.8/29', ag3: '198.18.214.16/29', ag4: '198.18.214.24/29' };
const ARCHIVE_S = 5;

describe('draining a database host', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, store: { archiveS: ARCHIVE_S } });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('moves a primary, a replica and a 1-node database off a draining host under writes with no acknowledged row lost, places nothing new there, and refuses a drain without capacity', async () => {
    const { fleet, dir, hostOf, store } = f;
    const { call, procs } = fleet;
    const cpState = join(dir, 'cp');
    onTestFailed(() => console.log(f.explain()));
    type AgentView = { id: string; connected: boolean; draining: boolean; drainingAt: number | null; drain: { membersLeft: number } | null; members: unknown[] };
    const agentsView = async () => (await call('GET', '/v4/fulcrum/agents')).body.data as AgentView[];
    const viewOf = async (h: { name: string }) => (await agentsView()).find((x) => x.id === h.name);

    // The fourth host drains (empty) while the databases are created: it takes none of them.
    const spare = f.agents[3]!;
    await until(`${f.agents.length} agents connected`, async () => (await agentsView()).filter((x) => x.connected).length === f.agents.length, 120_000, 500);
    const put = await call('POST', `/v4/fulcrum/agents/${spare.name}/drain`);
    expect(put.status, JSON.stringify(put.body)).toBe(200);
    expect(put.body).toMatchObject({ id: spare.name, draining: true, members_left: 0 });

    // a goes to the three others (primary on the first by id); c, 1-node, to the least loaded of
    // them, ties by id: a's primary's host; b to the least loaded again: a replica (member 3) there.
    const a = await spreadUnderWrites(f, 'mdr-a');
    const drained = hostOf(a.oldPrimary)!;
    const c = await singleUnderWrites(f, 'mdr-c');
    expect(c.host, 'the 1-node database shares the host of the primary of a').toBe(drained);
    const b = await spreadUnderWrites(f, 'mdr-b');
    const bHere = Object.keys(b.db.members).find((m) => hostOf(m) === drained);
    expect(bHere, `database b has a member on ${drained.name}`).toBeDefined();
    expect(b.db.members[bHere!]).toBe('failover');
    for (const x of [a.db, b.db, c.db]) expect(Object.keys(x.members).map((m) => hostOf(m))).not.toContain(spare);
    expect(await viewOf(spare)).toMatchObject({ draining: true, drain: { membersLeft: 0 }, members: [] });
    expect((await viewOf(drained))?.members).toHaveLength(3);

    // c's archive has a base and has shipped a round, with writes before and after.
    await until('writes to the 1-node database across an archive round', async () => attempts(c.loop).filter((x) => x.ok).length >= 20
      && (await call('GET', `${MYSQL}/${c.id}`)).body.oldest_restore_time ? true : undefined, 180_000, 500);

    // No capacity yet: the only host free of a's and b's members is draining. Refused, naming
    // both (c could go to either other host), and nothing is marked.
    const early = await call('POST', `/v4/fulcrum/agents/${drained.name}/drain`);
    expect(early.status).toBe(400);
    const why = JSON.stringify(early.body.errors);
    expect(why).toMatch(new RegExp(`cannot be drained: .*database ${a.id} \\(mdr-a\\) has no other host to go to`));
    expect(why).toMatch(new RegExp(`database ${b.id} \\(mdr-b\\) has no other host to go to`));
    expect(why).not.toContain(`database ${c.id} `);
    expect(await viewOf(drained)).toMatchObject({ draining: false, drainingAt: null, drain: null });
    expect((await call('POST', `/v4/fulcrum/agents/${spare.name}/undrain`)).body).toMatchObject({ id: spare.name, draining: false, members_left: 0 });

    const storePrefix = `us-east/db/${c.id}/`;
    const storedBefore = await store!.keys(storePrefix);
    expect(storedBefore.length, `objects of database ${c.id} in the store`).toBeGreaterThan(0);

    const started = Date.now();
    const r = await call('POST', `/v4/fulcrum/agents/${drained.name}/drain`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ id: drained.name, draining: true, members_left: 3 });
    // The round may have moved a member already (it runs every second): the answer above counted them.
    const during = await viewOf(drained);
    expect(during).toMatchObject({ draining: true, drainingAt: expect.any(Number) });
    expect(during?.drain?.membersLeft).toBeLessThanOrEqual(3);

    const spread = async (id: number) => {
      const x = await call('GET', `${MYSQL}/${id}`);
      if (x.body.status === 'failed') throw new Error(`database ${id} failed: ${JSON.stringify(x.body)}`);
      const on = Object.keys(x.body.members ?? {}).map((m) => hostOf(m)?.name);
      return x.body.status === 'active' && on.length === 3 && new Set(on).size === 3 && !on.includes(drained.name) ? x.body : undefined;
    };
    const single = async (id: number) => {
      const x = await call('GET', `${MYSQL}/${id}`);
      if (x.body.status === 'failed') throw new Error(`database ${id} failed: ${JSON.stringify(x.body)}`);
      const m = Object.keys(x.body.members ?? {});
      return x.body.status === 'active' && m.length === 1 && hostOf(m[0]!) && hostOf(m[0]!) !== drained ? x.body : undefined;
    };
    const [doneA, , doneC] = await until(`a, b and c active off ${drained.name}`, async () => {
      const [x, y, z] = [await spread(a.id), await spread(b.id), await single(c.id)];
      return x && y && z ? [x, y, z] : undefined;
    }, 900_000, 1000);
    const tookMs = Date.now() - started;
    await until(`no member left on ${drained.name}`, async () => (await viewOf(drained))?.drain?.membersLeft === 0 || undefined, 120_000, 1000);
    expect((await viewOf(drained))?.members).toEqual([]);
    expect(Object.values(doneA.members).filter((m) => m === 'primary')).toHaveLength(1);
    expect(hostOf(Object.keys(doneA.members).find((m) => doneA.members[m] === 'primary')!)).not.toBe(drained);
    const cTo = hostOf(Object.keys(doneC.members)[0]!)!;
    // c keeps its address and credentials: the client's write loop goes on with what it had.
    expect(doneC.hosts.primary).toBe(c.primary);
    expect((await call('GET', `${MYSQL}/${c.id}/credentials`)).body).toEqual(c.creds);

    const okAfter = Date.now();
    const loops = [['a (primary moved)', a], ['b (replica moved)', b], ['c (1-node, moved through the store)', c]] as const;
    // On a timeout, say which database's writes stalled and with what error (each loop records every attempt).
    const since = (x: (typeof loops)[number][1]) => attempts(x.loop).filter((t) => t.start > okAfter);
    onTestFailed(() => {
      for (const [name, x] of loops) {
        const list = since(x);
        const errs = [...new Set(list.filter((t) => !t.ok).map((t) => t.err ?? '?'))].slice(0, 5);
        console.log(`[db-host-drain] writes on ${name} since the drain: ${list.filter((t) => t.ok).length} ok of ${list.length}; errors: ${JSON.stringify(errs)}; loop output tail: ${x.loop.output().slice(-600)}`);
      }
    });
    await until('writes keep succeeding on a, b and c', () => loops.every(([, x]) => since(x).filter((t) => t.ok).length >= 3), 120_000, 100);
    for (const [, x] of loops) await x.loop.kill();

    const pauses = loops.map(([, x]) => longestPause(attempts(x.loop), started, Date.now()));
    const refusedC = attempts(c.loop).filter((t) => !t.ok && t.start >= started);
    console.log(`[db-host-drain] ${drained.name} drained in ${tookMs} ms (c moved to ${cTo.name}); longest pause between acknowledged writes: ${pauses[0]} ms on a (primary moved), ${pauses[1]} ms on b (replica moved), ${pauses[2]} ms on c (1-node; refused writes meanwhile: ${refusedC.length}, ${[...new Set(refusedC.map((t) => t.err ?? '?'))].join(', ')})`);
    // The goal for a switchover is well under 2 s (about 0.7 s measured here); the bound leaves
    // room for a loaded CI machine and still fails one that waited for the failover coordinator
    // (20 s). A 1-node database is read-only from its fence until it serves on the new host.
    expect(pauses[0]).toBeLessThan(8000);
    expect(pauses[1]).toBeLessThan(8000);
    for (const [name, x] of loops) {
      const { acked, missing } = await lostRows(x.client, x.loop);
      expect(acked.length, `acknowledged writes on ${name}`).toBeGreaterThan(5);
      expect(missing, `acknowledged rows missing on ${name}`).toEqual([]);
    }

    const events = (await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[];
    const switched = events.find((e) => e.entity?.id === a.id && e.action === 'database_failover' && /planned switchover/.test(e.message ?? ''));
    expect(switched, 'the switchover event').toBeDefined();
    console.log(`[db-host-drain] ${switched!.message}`);
    expect(events.some((e) => e.entity?.id === b.id && /moved off agent ag\d \(draining\) to agent/.test(e.message ?? ''))).toBe(true);
    const ofC = events.filter((e) => e.entity?.id === c.id).map((e) => e.message ?? '');
    expect(ofC.some((m) => m.startsWith(`Placed on agent ${cTo.name} (agent ${drained.name} is draining)`))).toBe(true);
    const moved = ofC.find((m) => m.startsWith(`Moved to agent ${cTo.name}`));
    expect(moved, 'the move event').toBeDefined();
    console.log(`[db-host-drain] ${moved}`);
    // The drain's events are recorded with the host among their hosts, so the agents API (and the Fleet page) lists them with it.
    const hostEvents = ((await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; recentEvents: { message: string | null }[] }[]).find((x) => x.id === drained.name)!.recentEvents;
    expect(hostEvents.some((e) => /moved off agent .* \(draining\)|Drain of agent/.test(e.message ?? ''))).toBe(true);

    // The old host removed c's node and folder and kept its objects in the store: the new host's
    // archive continues them (a fork to a second before the move, built from the store, needs them).
    await until(`c's folder gone from ${drained.name}`, () => !existsSync(join(dir, drained.name, 'databases', String(c.id))) || undefined, 120_000, 500);
    expect(procs[drained.name]!.output()).toContain('its backups and binlog archive in the store are kept');
    const storedAfter = new Set(await store!.keys(storePrefix));
    expect(storedBefore.filter((k) => !storedAfter.has(k)), 'objects of c gone from the store').toEqual([]);

    // Every other host now holds a member of a and b: draining one more would leave a member
    // with nowhere to go, so it is refused up front and nothing is marked.
    const other = f.agents.find((h) => h !== drained)!;
    const refused = await call('POST', `/v4/fulcrum/agents/${other.name}/drain`);
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body.errors)).toMatch(/cannot be drained: .*no other host to go to/);
    expect((await viewOf(other))?.draining).toBe(false);
    // The same refusal from the control plane's host.
    await expect(fulcrumCli(['host', 'drain', other.name, '--state', cpState])).rejects.toThrow(/cannot be drained: .*no other host to go to/);
    // Undrained (here from the control plane's host), the host takes members again.
    expect(await fulcrumCli(['host', 'undrain', drained.name, '--state', cpState])).toContain(`agent ${drained.name} is not draining; 0 member(s) on it`);
    expect(await viewOf(drained)).toMatchObject({ draining: false, drainingAt: null, drain: null });

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
