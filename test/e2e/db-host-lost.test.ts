// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { leftovers } from '../helpers/hosts.js';
import { MYSQL, fulcrumCli, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, lostRows, mysqlClient } from '../helpers/fleet-clients.js';

// A database host lost for good (docs/multi-host.md, "A lost host"): a 3-node semi_synch cluster
// on three of four agent hosts, written from a client host through hosts.primary (a data plane
// pair). The primary's host is cut off and declared lost with `fulcrum host lost`: another member
// is named primary, the lost member is re-placed on the fourth host and seeded from the new
// primary over TLS, and the database is active with three members on three hosts other than
// the lost one, with no acknowledged row lost. Then the lost host's link returns and it joins
// again with a new join token: its old member is removed, not rejoined. Nothing is left.
// From the declaration until the new member has caught up, the API says `degraded` and lists the
// new member in no `members`: it says `active` only once the "caught up" event exists.

const PREFIX = 'mhl';
const SUBNET = 193;
const NB_POOL = '198.18.192.0/24';
const DB_POOL = '198.18.193.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.194.0/29', ag2: '198.18.194.8/29', ag3: '198.18.194.16/29', ag4: '198.18.194.24/29' };

describe('a database host lost for good', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('re-places the lost primary\'s member on the fourth host, active with three members on three other hosts, no acknowledged row lost; the returning host\'s member is removed', async () => {
    const { fleet, agents, dir, cl, hostOf } = f;
    const { call, procs } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const { id, db, oldPrimary, client, loop } = await spreadUnderWrites(f, 'mhl-lost');
    const lost = hostOf(oldPrimary)!;
    const spare = agents.find((h) => !Object.keys(db.members).some((m) => hostOf(m) === h))!;

    // The primary's host is cut off for good and declared lost by the operator, on the control
    // plane's host (the same as POST /v4/fulcrum/agents/ID/lost).
    const cutAt = Date.now();
    await lost.linkDown();
    const declared = await fulcrumCli(['host', 'lost', lost.name, '--state', join(dir, 'cp')]);
    expect(declared).toContain(`agent ${lost.name} is lost`);
    // What the API says of the database from now on, until it is healed; whenever it says
    // `active` or lists a member on the spare host, whether the caught-up event existed by then
    // (read after the status: the event is stored before the status may say active).
    type Event = { action: string; message: string | null; entity: { id: number } | null };
    const caughtUp = async () => ((await call('GET', '/v4/account/events?page_size=100')).body.data as Event[])
      .some((e) => e.entity?.id === id && e.action === 'database_update' && /caught up/.test(e.message ?? ''));
    const said: { status: string; onSpare: boolean; caughtUp: boolean | null }[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const r = await call('GET', `${MYSQL}/${id}`);
        const onSpare = Object.keys(r.body.members ?? {}).some((m) => hostOf(m) === spare);
        said.push({ status: String(r.body.status), onSpare, caughtUp: r.body.status === 'active' || onSpare ? await caughtUp() : null });
        await new Promise((ok) => setTimeout(ok, 250));
      }
    })();
    const first = await until('a write begun after the cut succeeds', () => attempts(loop).find((a) => a.start > cutAt && a.ok), 60_000, 100);
    const gap = first.end - cutAt;
    const failed = attempts(loop).filter((a) => a.start > cutAt - 4000 && a.start < first.start && !a.ok);
    console.log(`[db-host-lost] primary's host ${lost.name} cut and declared lost: writes through hosts.primary succeeded again after ${gap} ms (${failed.length} failed attempts: ${[...new Set(failed.map((a) => a.err))].join(', ')})`);
    expect(gap).toBeLessThan(30_000);
    const hosts = await call('GET', '/v4/fulcrum/agents');
    expect((hosts.body.data as { id: string; state: string }[]).find((a) => a.id === lost.name)?.state).toBe('lost');

    // Healed: active, three members on three hosts, none on the lost one, one on the spare.
    const healed = await until('active with three members on three other hosts', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body.members ?? {});
      const on = new Set(m.map((x) => hostOf(x)?.name));
      return r.body.status === 'active' && m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name) ? r.body : undefined;
    }, 600_000, 1000);
    const activeAt = Date.now();
    console.log(`[db-host-lost] active with three members on ${Object.keys(healed.members).map((m) => hostOf(m)!.name).join(', ')} ${activeAt - cutAt} ms after the cut`);
    // The new member acknowledges semi-sync writes once the control plane has cleared its seeding
    // mark (the "caught up" event, stored before the status says active) and its agent was sent
    // the member unmarked: the primary counts both replicas again.
    const newMember = Object.keys(healed.members).find((m) => hostOf(m) === spare)!;
    const direct = await mysqlClient(call, cl, id, newMember);
    const onPrimary = await mysqlClient(call, cl, id, Object.keys(healed.members).find((m) => healed.members[m] === 'primary')!);
    await until('the new member acknowledging, counted by the primary', async () => {
      const [on] = (await direct.sql('SELECT @@rpl_semi_sync_slave_enabled AS v')) ?? [];
      const [clients] = (await onPrimary.sql("SHOW GLOBAL STATUS LIKE 'Rpl_semi_sync_master_clients'")) ?? [];
      return (Number(on?.v) === 1 && Number(clients?.Value) === 2) || undefined;
    }, 120_000, 250);
    console.log(`[db-host-lost] the new member acknowledges, both replicas counted, ${Date.now() - activeAt} ms after active was read`);
    watching = false;
    await watcher;
    console.log(`[db-host-lost] from the declaration: ${said.filter((x) => x.status === 'degraded').length} reads degraded, then ${said.filter((x) => x.status === 'active').length} active; first active with the caught-up event stored: ${said.find((x) => x.status === 'active')?.caughtUp ?? 'none'}`);
    // Degraded while it healed; active, and the new member listed, only once it had caught up.
    expect(said[0]?.status).toBe('degraded');
    expect(said.filter((x) => (x.status === 'active' || x.onSpare) && !x.caughtUp)).toEqual([]);
    expect(await caughtUp()).toBe(true);
    expect(Object.values(healed.members).filter((r) => r === 'primary')).toHaveLength(1);
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    await loop.kill();

    // No acknowledged row is lost, through hosts.primary and on the new member itself.
    const { acked, missing, stored } = await lostRows(client, loop);
    expect(acked.length).toBeGreaterThan(5);
    expect(missing).toEqual([]);
    const events = await call('GET', '/v4/account/events?page_size=100');
    const mine = (events.body.data as { action: string; message: string | null; entity: { id: number } | null }[]).filter((e) => e.entity?.id === id);
    await until(`every row on the new member ${newMember}`, async () => (await direct.sql('SELECT COUNT(*) AS n FROM fh.t'))?.[0]?.n === stored.size, 120_000, 1000);
    const seeded = await until('the caught-up event', async () => ((await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[])
      .find((e) => e.entity?.id === id && e.action === 'database_update' && /caught up/.test(e.message ?? '')), 120_000, 1000);
    console.log(`[db-host-lost] ${stored.size} rows, all on the new member on ${spare.name}; ${seeded.message}`);
    expect(mine.some((e) => e.action === 'database_degraded' && (e.message ?? '').includes(`agent ${lost.name}`))).toBe(true);
    expect(mine.some((e) => e.action === 'database_update' && (e.message ?? '').includes(`placed on agent ${spare.name}`))).toBe(true);

    // The lost host returns: its old agent is refused (fenced), so the operator joins it again
    // with a new join token. It is sent none of its old members, and its agent removes its member.
    await lost.linkUp();
    await procs[lost.name]!.stop();
    delete procs[lost.name];
    const token = await call('POST', '/v4/fulcrum/join-tokens', { role: 'agent', id: lost.name, region: 'us-east' });
    expect(token.status).toBe(200);
    procs[lost.name] = lost.fulcrum(['agent', '--control-plane', fleet.grpc, '--state', join(dir, lost.name), '--runtime', 'process', '--join', token.body.token, '--node-pool', NODE_POOLS[lost.name]!]);
    await until('the returning host is up', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { id: string; state: string }[]).find((a) => a.id === lost.name)?.state === 'up' || undefined;
    }, 120_000, 1000);
    await until('the old member removed from the returning host', () => {
      const nodes = join(dir, lost.name, 'runtime', 'nodes');
      const left = existsSync(nodes) ? readdirSync(nodes).filter((n) => n.includes(`-db${id}-n`)) : [];
      return (!existsSync(join(dir, lost.name, 'databases', String(id))) && left.length === 0) || undefined;
    }, 120_000, 1000);
    const after = await call('GET', `${MYSQL}/${id}`);
    expect(after.body.status).toBe('active');
    expect(Object.keys(after.body.members).map((m) => hostOf(m)?.name)).not.toContain(lost.name);

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
