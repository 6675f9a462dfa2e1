// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its own temporary copy of the 11.8 image's files).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { until } from '../helpers/lab.js';
import { leftovers, type Host } from '../helpers/hosts.js';
import { engineOfSeries } from '../helpers/engines.js';
import { engineFromImage, ensureSeriesImage, type ImageEngine } from '../helpers/image-engine.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, lostRows, type Attempt } from '../helpers/fleet-clients.js';

// Rolling changes across hosts (docs/multi-host.md, "Rolling changes across hosts"): a 3-node
// semi_synch database spread over three agent hosts, written from a client host through its
// hosts.primary (a data plane pair), is resized and then given an engine_config key that needs a
// restart. The control plane restarts the replicas one by one, switches the primary over onto a
// restarted replica (the drain's switchover) and restarts the old primary; then it is upgraded
// from 10.11 to 11.8 the same way. Each change ends `active` with three members on three hosts,
// no acknowledged row lost, and the longest pause between acknowledged writes printed. The
// process-runtime agents offer the host's 10.11 mariadbd and the 11.8 build of the lab's image
// (scripts/build-mysql-image.sh --suite trixie) laid out from its files (helpers/image-engine.ts).

const PREFIX = 'mrx';
const SUBNET = 227;
const NB_POOL = '198.18.226.0/24';
const DB_POOL = '198.18.227.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.228.0/29', ag2: '198.18.228.8/29', ag3: '198.18.228.16/29' };

/** The longest time between two consecutive acknowledged writes that end between `from` and `to`. */
function longestPause(list: Attempt[], from: number, to: number): number {
  const ends = list.filter((a) => a.ok && a.end >= from && a.start <= to).map((a) => a.end).sort((x, y) => x - y);
  let worst = 0;
  for (let i = 1; i < ends.length; i++) worst = Math.max(worst, ends[i]! - ends[i - 1]!);
  return worst;
}

/** The command lines of the MariaDB servers running in a host (its network namespace). */
async function serversIn(h: Host): Promise<string[]> {
  const { stdout } = await h.exec('sh', ['-c', 'for p in $(ip netns pids "$1"); do tr "\\0" " " </proc/$p/cmdline 2>/dev/null; echo; done', 'sh', h.ns]);
  return stdout.split('\n').filter((l) => l.includes('mariadbd') && l.includes('--defaults-file='));
}

describe('rolling changes of a database spread over hosts', () => {
  let f: HostsFleet;
  let engineDir = '';
  let newer: ImageEngine;

  beforeAll(async () => {
    const image = await ensureSeriesImage('11.8', ['--suite', 'trixie']);
    engineDir = mkdtempSync(join(tmpdir(), `fulcrum-${PREFIX}-engine-`));
    newer = await engineFromImage(image, engineDir);
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, agentArgs: ['--engines', newer.enginesFile] });
  }, 600_000);

  afterAll(async () => {
    await f?.close();
    if (engineDir) rmSync(engineDir, { recursive: true, force: true });
  });

  it('resizes, restarts for an engine_config key and upgrades 10.11 to 11.8 member by member under writes, with no acknowledged row lost', async () => {
    const { fleet, hostOf, agents } = f;
    const { call } = fleet;
    onTestFailed(() => console.log(f.explain()));
    expect(newer.version).toMatch(/^11\.8\.\d+$/);
    // Every agent offers both builds; the database starts on the host's 10.11.
    const offered = await until('three agents offering 10.11 and 11.8', async () => {
      const list = (await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; engines?: { id: string; version: string }[] }[];
      const mine = list.filter((x) => agents.some((h) => h.name === x.id));
      return mine.length === 3 && mine.every((x) => x.engines?.some((e) => e.id === newer.id) && x.engines.some((e) => e.version.startsWith('10.11.'))) ? mine[0]!.engines! : undefined;
    }, 180_000, 500);
    const a = await spreadUnderWrites(f, 'mrx-a', agents.length, engineOfSeries(offered, '10.11'));

    /** PUTs `body`, sees the status it asked for, and waits until the database is active again with three members on three hosts. */
    const change = async (body: Record<string, unknown>, during: 'resizing' | 'updating') => {
      const started = Date.now();
      const r = await call('PUT', `${MYSQL}/${a.id}`, body);
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      expect(r.body.status).toBe(during);
      const done = await until(`the ${during} database active again with three members on three hosts`, async () => {
        const x = await call('GET', `${MYSQL}/${a.id}`);
        const on = Object.keys(x.body.members ?? {}).map((m) => hostOf(m)?.name);
        return x.body.status === 'active' && on.length === 3 && new Set(on).size === 3 ? x.body : undefined;
      }, 600_000, 500);
      const tookMs = Date.now() - started;
      const okAfter = Date.now();
      await until('writes keep succeeding', () => attempts(a.loop).filter((x) => x.start > okAfter && x.ok).length >= 3, 60_000, 100);
      return { done, tookMs, pauseMs: longestPause(attempts(a.loop), started, Date.now()) };
    };

    const resize = await change({ type: 'g6-standard-1' }, 'resizing');
    expect(resize.done.type).toBe('g6-standard-1');
    const config = await change({ engine_config: { mysql: { innodb_ft_min_token_size: 2 } } }, 'updating');
    // A key read only at start: the primary now serving was restarted with it.
    const [row] = await until('the restart-time key through hosts.primary', () => a.client.sql('SELECT @@innodb_ft_min_token_size AS v'), 60_000, 1000) as { v: number }[];
    expect(Number(row!.v)).toBe(2);
    // One server per host, the host's own 10.11 until the upgrade.
    for (const h of agents) {
      const servers = await serversIn(h);
      expect(servers.length, `${h.name}: ${servers.join('\n')}`).toBe(1);
      expect(servers[0], h.name).not.toContain(engineDir);
    }

    // The version upgrade: a series, resolved to the 11.8 build every member's agent offers.
    const upgrade = await change({ version: '11.8' }, 'updating');
    expect(upgrade.done.version).toBe(newer.version);
    expect(upgrade.done.engine).toBe('mysql');
    const [v] = await until('VERSION() through hosts.primary', () => a.client.sql('SELECT VERSION() AS v'), 60_000, 1000) as { v: string }[];
    expect(v!.v).toMatch(/^11\.8\.\d+-MariaDB/);
    // Every member's server is the 11.8 build now, one per host, and the host's 10.11 runs none.
    for (const h of agents) {
      const servers = await serversIn(h);
      expect(servers.length, `${h.name}: ${servers.join('\n')}`).toBe(1);
      expect(servers[0], h.name).toContain(`${engineDir}/rootfs/usr/sbin/mariadbd`);
    }
    await a.loop.kill();

    console.log(`[db-host-rolling] resize done in ${resize.tookMs} ms, longest pause between acknowledged writes ${resize.pauseMs} ms; engine_config restart done in ${config.tookMs} ms, longest pause ${config.pauseMs} ms; upgrade 10.11 -> ${newer.version} done in ${upgrade.tookMs} ms, longest pause ${upgrade.pauseMs} ms`);
    // A switchover pauses writes well under 2 s; the bound leaves room for a loaded CI machine and
    // still fails a rollout that restarted the primary in place or waited for a failover (20 s).
    expect(resize.pauseMs).toBeLessThan(8000);
    expect(config.pauseMs).toBeLessThan(8000);
    expect(upgrade.pauseMs).toBeLessThan(8000);
    const { acked, missing } = await lostRows(a.client, a.loop);
    expect(acked.length).toBeGreaterThan(5);
    expect(missing).toEqual([]);

    const events = (await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[];
    const mine = events.filter((e) => e.entity?.id === a.id);
    expect(mine.filter((e) => e.message === 'Rolling change done: every member runs the new spec.')).toHaveLength(3);
    expect(mine.filter((e) => e.action === 'database_failover' && /planned switchover \(a rolling change\)/.test(e.message ?? ''))).toHaveLength(3);
    expect(mine.filter((e) => /^Rolling change: member \d on agent ag\d runs the new spec/.test(e.message ?? '')).length).toBeGreaterThanOrEqual(9);
    console.log(`[db-host-rolling] ${mine.find((e) => e.action === 'database_failover')!.message}`);
    // A fenced primary takes no write after its position, so the old primary rejoins with nothing of its own.
    expect(mine.filter((e) => /errant/.test(e.message ?? '')).map((e) => e.message)).toEqual([]);

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
