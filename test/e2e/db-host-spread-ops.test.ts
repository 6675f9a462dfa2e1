// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { FAILOVER_AFTER_MS } from '../../control-plane/domain/databases/failover-decision.js';
import { until } from '../helpers/lab.js';
import { leftovers, type Host } from '../helpers/hosts.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, longestPause, lostRows, mysqlClient } from '../helpers/fleet-clients.js';

// A patch, a suspend and a resume of a 3-node semi_synch database spread over three agent hosts
// (docs/multi-host.md, "Patch, suspend and resume across hosts"), written from a client host
// through hosts.primary. The patch restarts every member, replicas first, with a planned
// switchover before the old primary's restart, under writes: no acknowledged row lost. The suspend
// stops every member's server on every host and nothing is promoted while it is down; the resume
// brings back the same primary, every row, and replicas that replicate from it.

const PREFIX = 'msops';
const SUBNET = 247;
const NB_POOL = '198.18.245.0/24';
const DB_POOL = '198.18.246.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.248.0/29', ag2: '198.18.248.8/29', ag3: '198.18.248.16/29' };

/** The process ids of the MariaDB servers running in a host (its network namespace). */
async function serverPids(h: Host): Promise<string[]> {
  const { stdout } = await h.exec('sh', ['-c', 'for p in $(ip netns pids "$1"); do if tr "\\0" " " </proc/$p/cmdline 2>/dev/null | grep -q "[m]ariadbd.*--defaults-file="; then echo $p; fi; done', 'sh', h.ns]);
  return stdout.split('\n').filter((l) => /^\d+$/.test(l));
}

describe('patch, suspend and resume of a database spread over hosts', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  }, 600_000);

  afterAll(async () => {
    await f?.close();
  });

  it('patches member by member under writes, suspends every member on every host with nothing promoted, and resumes with the same primary and every row', async () => {
    const { fleet, hostOf, agents } = f;
    const { call } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const a = await spreadUnderWrites(f, 'msops-a');
    const get = async () => (await call('GET', `${MYSQL}/${a.id}`)).body;
    const primaryOf = (db: { members?: Record<string, string> }) => Object.keys(db.members ?? {}).find((m) => db.members![m] === 'primary');
    const events = async () => ((await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; status: string; message: string | null; created: string; entity: { id: number } | null }[])
      .filter((e) => e.entity?.id === a.id);

    // The patch: every member's server restarted, the primary moved by a planned switchover.
    const before = new Map(await Promise.all(agents.map(async (h) => [h.name, await serverPids(h)] as const)));
    for (const h of agents) expect(before.get(h.name), h.name).toHaveLength(1);
    const started = Date.now();
    const p = await call('POST', `${MYSQL}/${a.id}/patch`);
    expect(p.status, JSON.stringify(p.body)).toBe(200);
    expect((await get()).status).toBe('updating');
    const patched = await until('the patched database active with three members on three hosts', async () => {
      const x = await get();
      const on = Object.keys(x.members ?? {}).map((m) => hostOf(m)?.name);
      return x.status === 'active' && on.length === 3 && new Set(on).size === 3 ? x : undefined;
    }, 120_000, 500);
    const patchMs = Date.now() - started;
    const okAfter = Date.now();
    await until('writes keep succeeding after the patch', () => attempts(a.loop).filter((x) => x.start > okAfter && x.ok).length >= 3, 60_000, 100);
    const patchPause = longestPause(attempts(a.loop), started, Date.now());
    for (const h of agents) {
      const now = await serverPids(h);
      expect(now, h.name).toHaveLength(1);
      expect(now[0], `${h.name}: the member's server was restarted`).not.toBe(before.get(h.name)![0]);
    }
    expect(primaryOf(patched)).not.toBe(a.oldPrimary);
    const afterPatch = await events();
    expect(afterPatch.some((e) => e.message === 'Rolling change done: every member runs the new spec.')).toBe(true);
    expect(afterPatch.some((e) => e.action === 'database_update' && e.status === 'finished' && e.message === 'Patch requested')).toBe(true);
    await a.loop.kill();
    const { acked, missing } = await lostRows(a.client, a.loop);
    expect(acked.length).toBeGreaterThan(5);
    expect(missing).toEqual([]);
    console.log(`[db-host-spread-ops] patch done in ${patchMs} ms, longest pause between acknowledged writes ${patchPause} ms`);
    expect(patchPause).toBeLessThan(8000);

    // The suspend: no server of the database left on any host, nothing promoted meanwhile.
    const primary = primaryOf(patched)!;
    const suspendedAt = Date.now();
    const s = await call('POST', `${MYSQL}/${a.id}/suspend`);
    expect(s.status, JSON.stringify(s.body)).toBe(200);
    await until('the database suspended', async () => (await get()).status === 'suspended' || undefined, 120_000, 500);
    await until('no server of the database on any host', async () => (await Promise.all(agents.map(serverPids))).every((x) => x.length === 0) || undefined, 60_000, 500);
    const suspendMs = Date.now() - suspendedAt;
    // Down for well past the failover delay: nothing is named primary, nothing restarts.
    const quietUntil = Date.now() + FAILOVER_AFTER_MS * 4;
    while (Date.now() < quietUntil) {
      expect((await get()).status).toBe('suspended');
      expect((await Promise.all(agents.map(serverPids))).flat()).toEqual([]);
      await new Promise((r) => setTimeout(r, 500));
    }
    const whileSuspended = (await events()).filter((e) => e.action === 'database_failover' && Date.parse(`${e.created}Z`) >= suspendedAt - 1000);
    expect(whileSuspended.map((e) => e.message)).toEqual([]);
    expect((await events()).some((e) => e.action === 'database_suspend' && e.status === 'finished')).toBe(true);

    // The resume: the same primary, every row, the replicas replicating from it.
    const resumedAt = Date.now();
    const r = await call('POST', `${MYSQL}/${a.id}/resume`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect((await get()).status).toBe('resuming');
    const resumed = await until('the resumed database active with three members', async () => {
      const x = await get();
      return x.status === 'active' && Object.keys(x.members ?? {}).length === 3 ? x : undefined;
    }, 120_000, 500);
    const resumeMs = Date.now() - resumedAt;
    console.log(`[db-host-spread-ops] suspended with no server left in ${suspendMs} ms, active again ${resumeMs} ms after the resume`);
    expect(primaryOf(resumed)).toBe(primary);
    for (const h of agents) expect(await serverPids(h), h.name).toHaveLength(1);
    expect((await events()).filter((e) => e.action === 'database_failover' && Date.parse(`${e.created}Z`) >= suspendedAt - 1000).map((e) => e.message)).toEqual([]);
    const resumeEvents = (await events()).filter((e) => e.action === 'database_resume');
    expect(resumeEvents.map((e) => e.status), JSON.stringify(await events())).toEqual(['finished']);
    const back = await lostRows(a.client, a.loop);
    expect(back.missing).toEqual([]);
    // A row written now reaches every replica.
    await until('a write through hosts.primary after the resume', () => a.client.sql('INSERT INTO fh.t (id) VALUES (999999)', 'SELECT 1 AS one'), 60_000, 1000);
    for (const m of Object.keys(resumed.members).filter((x) => x !== primary)) {
      const direct = await mysqlClient(call, f.cl, a.id, m);
      await until(`replica ${m} has the row written after the resume`, async () => ((await direct.sql('SELECT COUNT(*) AS n FROM fh.t WHERE id = 999999'))?.[0]?.n === 1) || undefined, 60_000, 1000);
    }

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 900_000);
});
