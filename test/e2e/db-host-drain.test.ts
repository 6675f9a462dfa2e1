// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { leftovers } from '../helpers/hosts.js';
import { MYSQL, attempts, fulcrumCli, longestPause, lostRows, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';

// Draining an agent host (docs/multi-host.md, "Draining a host"): two 3-node semi_synch
// databases on four agent hosts, so that one host holds the primary of the first and a replica of
// the second, each written from a client host through its hosts.primary (a data plane pair).
// `POST /v4/fulcrum/agents/:id/drain` moves everything off that host: the replica is re-placed
// first, the primary is switched over (fence, catch-up, new term) and then moved as a replica.
// Both databases end active with three members on three hosts, none on the drained one, with no
// acknowledged row lost; the longest pause between acknowledged writes is printed. A drain that
// would leave a member nowhere to go is refused up front. Nothing is left.

const PREFIX = 'mdr';
const SUBNET = 213;
const NB_POOL = '198.18.212.0/24';
const DB_POOL = '198.18.213.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.214.0/29', ag2: '198.18.214.8/29', ag3: '198.18.214.16/29', ag4: '198.18.214.24/29' };

describe('draining a database host', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('moves a primary and a replica off a draining host under writes with no acknowledged row lost, and refuses a drain without capacity', async () => {
    const { fleet, hostOf } = f;
    const { call } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const a = await spreadUnderWrites(f, 'mdr-a');
    const drained = hostOf(a.oldPrimary)!;
    // The second database goes to the least loaded hosts: the free one first, then two of the
    // first's; it is recreated until the drained host holds one of its replicas (placement ties
    // are broken by id, so the first try does it).
    const b = await spreadUnderWrites(f, 'mdr-b');
    const bMembers = Object.keys(b.db.members);
    const bHere = bMembers.find((m) => hostOf(m) === drained);
    expect(bHere, `database b has a member on ${drained.name}`).toBeDefined();
    expect(b.db.members[bHere!]).toBe('failover');

    type AgentView = { id: string; draining: boolean; drainingAt: number | null; drain: { membersLeft: number } | null; members: unknown[]; state: string };
    const agentsView = async () => (await call('GET', '/v4/fulcrum/agents')).body.data as AgentView[];
    expect((await agentsView()).find((x) => x.id === drained.name)).toMatchObject({ draining: false, drainingAt: null, drain: null });
    expect((await agentsView()).find((x) => x.id === drained.name)?.members).toHaveLength(2);

    const started = Date.now();
    const r = await call('POST', `/v4/fulcrum/agents/${drained.name}/drain`);
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ id: drained.name, draining: true, members_left: 2 });
    expect((await agentsView()).find((x) => x.id === drained.name)).toMatchObject({ draining: true, drain: { membersLeft: 2 } });

    const settled = async (id: number) => {
      const x = await call('GET', `${MYSQL}/${id}`);
      const on = Object.keys(x.body.members ?? {}).map((m) => hostOf(m)?.name);
      return x.body.status === 'active' && on.length === 3 && new Set(on).size === 3 && !on.includes(drained.name) ? x.body : undefined;
    };
    const [doneA] = await until(`both databases active with three members off ${drained.name}`, async () => {
      const [x, y] = [await settled(a.id), await settled(b.id)];
      return x && y ? [x, y] : undefined;
    }, 900_000, 1000);
    const tookMs = Date.now() - started;
    await until(`no member left on ${drained.name}`, async () => (await agentsView()).find((x) => x.id === drained.name)?.drain?.membersLeft === 0 || undefined, 120_000, 1000);
    expect((await agentsView()).find((x) => x.id === drained.name)?.members).toEqual([]);
    expect(Object.values(doneA.members).filter((m) => m === 'primary')).toHaveLength(1);
    expect(hostOf(Object.keys(doneA.members).find((m) => doneA.members[m] === 'primary')!)).not.toBe(drained);
    const okAfter = Date.now();
    // On a timeout, say which database's writes stalled and with what error (the loop records each attempt).
    const since = (x: typeof a) => attempts(x.loop).filter((t) => t.start > okAfter);
    onTestFailed(() => {
      for (const [name, x] of [['a (primary moved)', a], ['b (replica moved)', b]] as const) {
        const list = since(x);
        const errs = [...new Set(list.filter((t) => !t.ok).map((t) => t.err ?? '?'))].slice(0, 5);
        console.log(`[db-host-drain] writes on ${name} since the drain: ${list.filter((t) => t.ok).length} ok of ${list.length}; errors: ${JSON.stringify(errs)}; loop output tail: ${x.loop.output().slice(-600)}`);
      }
    });
    await until('writes keep succeeding on both', () => since(a).filter((x) => x.ok).length >= 3 && since(b).filter((x) => x.ok).length >= 3, 60_000, 100);
    await a.loop.kill();
    await b.loop.kill();

    const pauseA = longestPause(attempts(a.loop), started, Date.now());
    const pauseB = longestPause(attempts(b.loop), started, Date.now());
    console.log(`[db-host-drain] ${drained.name} drained in ${tookMs} ms; longest pause between acknowledged writes: ${pauseA} ms on the database whose primary moved, ${pauseB} ms on the one whose replica moved`);
    // The goal is well under 2 s (about 0.7 s measured here); the bound leaves room for a loaded CI
    // machine and still fails a switchover that waited for the failover coordinator (20 s).
    expect(pauseA).toBeLessThan(8000);
    expect(pauseB).toBeLessThan(8000);
    for (const x of [a, b]) {
      const { acked, missing } = await lostRows(x.client, x.loop);
      expect(acked.length).toBeGreaterThan(5);
      expect(missing).toEqual([]);
    }
    const events = (await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[];
    const switched = events.find((e) => e.entity?.id === a.id && e.action === 'database_failover' && /planned switchover/.test(e.message ?? ''));
    expect(switched, 'the switchover event').toBeDefined();
    console.log(`[db-host-drain] ${switched!.message}`);
    expect(events.some((e) => e.entity?.id === b.id && /moved off agent ag\d \(draining\) to agent/.test(e.message ?? ''))).toBe(true);
    // The drain's events name the host as "agent ID", so the agents API (and the Fleet page) lists them with it.
    const hostEvents = ((await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; recentEvents: { message: string | null }[] }[]).find((x) => x.id === drained.name)!.recentEvents;
    expect(hostEvents.some((e) => /moved off agent .* \(draining\)|Drain of agent/.test(e.message ?? ''))).toBe(true);

    // Every other host now holds a member of both databases: draining one more would leave a
    // member with nowhere to go, so it is refused up front and nothing is marked.
    const other = f.agents.find((h) => h !== drained)!;
    const refused = await call('POST', `/v4/fulcrum/agents/${other.name}/drain`);
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body.errors)).toMatch(/cannot be drained: .*no other host to go to/);
    expect((await agentsView()).find((x) => x.id === other.name)?.draining).toBe(false);
    // The same refusal from the control plane's host.
    await expect(fulcrumCli(['host', 'drain', other.name, '--state', join(f.dir, 'cp')])).rejects.toThrow(/cannot be drained: .*no other host to go to/);
    // Undrained (here from the control plane's host), the host takes members again.
    expect(await fulcrumCli(['host', 'undrain', drained.name, '--state', join(f.dir, 'cp')])).toContain(`agent ${drained.name} is not draining; 0 member(s) on it`);
    expect((await agentsView()).find((x) => x.id === drained.name)).toMatchObject({ draining: false, drainingAt: null, drain: null });

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
