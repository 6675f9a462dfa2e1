/**
 * bench/provision, re-placement part: how long a 3-node database takes to be whole again after
 * one member's host is declared lost (docs/multi-host.md, "A lost host"), for N MB of data.
 *
 * Placement tells hosts apart by agent, and puts members of one cluster on distinct agents that
 * can run part of a cluster across hosts; an agent whose node pool is loopback does not offer
 * that (agent.ts, `membersAcrossHosts`). So this part runs on network-namespace hosts, the e2e
 * tests' own fleet (test/helpers/fleet-hosts.ts, `startHostsFleet`; needs root): a control plane,
 * a data plane pair, four process-runtime agents on four hosts and a client host, every one a
 * real `fulcrum` process. Then:
 *
 *  1. a 3-node semi_synch database on three of the four hosts, the write loop of the e2e tests
 *     running through hosts.primary (an insert every 200 ms), loaded with N MB (fork.ts's load,
 *     run from the client host straight to the primary member) and read back on every member;
 *  2. the host of one member (a replica by default, `--replace-lose primary` for the primary) has
 *     its link cut and is declared lost through the API (POST /v4/fulcrum/agents/ID/lost, what
 *     `fulcrum host lost` calls);
 *  3. sampled every 500 ms until the database is `active` with three members on three hosts none
 *     of which is the lost one: when the control plane placed the member on the fourth host (its
 *     event), when that host's agent created the node (its data directory appears), when it
 *     reported the node rebuilt and replicating (its event: replication running), when the
 *     control plane saw it caught up with the primary (its event), and `active`.
 *
 * A re-placed member is seeded by replaying the primary's binlog from the first GTID over TLS
 * (agent/database/rejoin.ts), so the seed's MB/s is the data's MB over the time from the node's
 * creation to caught up; the new node's app/t.ibd size is printed as it grows, with the CPU
 * seconds of each agent host's process tree (agent, mariadbd and their children) meanwhile. The
 * rows are then checked on the new member (count and CRC32 sum against the primary's).
 */
import { existsSync, readdirSync, statSync } from 'node:fs';
import { loadavg } from 'node:os';
import { join } from 'node:path';
import { until } from '../../test/helpers/lab.js';
import { MYSQL, attempts, mysqlClient, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../../test/helpers/fleet-hosts.js';
import { loadSql, TABLE_SUM } from './fork.js';
import { treeCpuSeconds } from './store.js';

export interface ReplaceFigure {
  mb: number;
  lost: 'primary' | 'replica';
  /** Seconds after the declaration, each phase (undefined when it was never seen). */
  placed?: number;
  created?: number;
  replicating?: number;
  caughtUp?: number;
  active: number;
  /** Seed MB/s: the data's MB over node created -> caught up. */
  seedMbPerS?: number;
  /** CPU seconds of each agent host's process tree from the declaration to active. */
  cpu: Record<string, number>;
  load1: number;
  note: string;
}

// Its own netns prefix and subnet (test/helpers/hosts.ts): none of the e2e files uses these.
const PREFIX = 'brp';
const SUBNET = 243;
const NB_POOL = '198.18.242.0/24';
const DB_POOL = '198.18.243.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.244.0/29', ag2: '198.18.244.8/29', ag3: '198.18.244.16/29', ag4: '198.18.244.24/29' };

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MB = 1048576;

/** Runs the re-placement for each size, handing each figure to `onFigure` as it is measured. */
export async function measureReplace(sizesMb: number[], lose: 'primary' | 'replica', onFigure: (f: ReplaceFigure) => void): Promise<void> {
  for (const mb of sizesMb) await measureOne(mb, lose, onFigure);
}

interface Event { action: string; message: string | null; entity: { id: number } | null }

async function measureOne(mb: number, lose: 'primary' | 'replica', onFigure: (f: ReplaceFigure) => void): Promise<void> {
  const f: HostsFleet = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS });
  const { call, procs } = f.fleet;
  try {
    const { id, db, oldPrimary, loop } = await spreadUnderWrites(f, `bench-replace-${mb}`);
    const members = Object.keys(db.members);
    const spare = f.agents.find((h) => !members.some((m) => f.hostOf(m) === h))!;
    console.log(`bench/provision replace (${mb} MB): database ${id} on ${members.map((m) => `${f.hostOf(m)!.name} (${db.members[m]})`).join(', ')}; spare host ${spare.name}`);

    // 1. The load, from the client host straight to the primary member, one session per statement.
    const primaryClient = await mysqlClient(call, f.cl, id, oldPrimary);
    const load = loadSql(mb);
    const t0 = Date.now();
    for (const [i, stmt] of load.inserts.entries()) {
      const before = i === 0 ? load.setup : ['USE app'];
      if ((await primaryClient.sql(...before, stmt)) === undefined) throw new Error(`the load failed at insert ${i + 1} of ${load.inserts.length}`);
    }
    const [want] = await until('the primary\'s checksum', () => primaryClient.sql(TABLE_SUM), 600_000, 1000);
    console.log(`bench/provision replace (${mb} MB): ${load.rows} rows loaded in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // Every member holds the whole load before a host goes: the new member's seed is then the
    // only copy being made.
    for (const m of members) {
      const c = m === oldPrimary ? primaryClient : await mysqlClient(call, f.cl, id, m);
      await until(`every row on member ${m}`, async () => (await c.sql('SELECT COUNT(*) AS n FROM app.t'))?.[0]?.n === load.rows, 1_800_000, 2000);
    }

    const lostMember = lose === 'primary' ? oldPrimary : members.find((m) => db.members[m] !== 'primary')!;
    const lost = f.hostOf(lostMember)!;
    const pids = Object.fromEntries(f.agents.map((h) => [h.name, procs[h.name]!.proc.pid!]));
    const cpu0 = Object.fromEntries(f.agents.map((h) => [h.name, treeCpuSeconds(pids[h.name])]));
    const newDir = join(f.dir, spare.name, 'databases', String(id));
    // The new node's folder: n<k> under its database's folder on the spare host.
    const newNode = () => (existsSync(newDir) ? readdirSync(newDir).find((n) => /^n\d+$/.test(n)) : undefined);
    const primaryIbd = join(f.dir, f.hostOf(oldPrimary)!.name, 'databases', String(id));
    const ibdMb = (dbDir: string) => {
      const n = existsSync(dbDir) ? readdirSync(dbDir).find((x) => /^n\d+$/.test(x) && existsSync(join(dbDir, x, 'data', 'app', 't.ibd'))) : undefined;
      return n ? statSync(join(dbDir, n, 'data', 'app', 't.ibd')).size / MB : 0;
    };
    const sourceMb = ibdMb(primaryIbd);

    // 2. The host is cut off and declared lost.
    await lost.linkDown();
    const cutAt = Date.now();
    const declared = await call('POST', `/v4/fulcrum/agents/${lost.name}/lost`);
    if (declared.status !== 200) throw new Error(`declaring ${lost.name} lost: HTTP ${declared.status} ${JSON.stringify(declared.body)}`);
    const at = Date.now();
    const since = () => (Date.now() - at) / 1000;
    console.log(`bench/provision replace (${mb} MB): ${lost.name} (the ${lose}'s host) cut and declared lost in ${((at - cutAt) / 1000).toFixed(1)} s; its member was ${lostMember}`);

    // 3. The phases, sampled every 500 ms.
    const phase: Partial<Record<'placed' | 'created' | 'replicating' | 'caughtUp', number>> = {};
    let caughtUpMsg = '';
    let lastPrint = 0;
    let healed: any;
    for (const deadline = Date.now() + 3_600_000; !healed; await sleep(500)) {
      if (Date.now() > deadline) throw new Error(`timed out: database ${id} active with three members after ${lost.name} was lost (phases so far: ${JSON.stringify(phase)})`);
      const ev = ((await call('GET', '/v4/account/events?page_size=100')).body?.data ?? []) as Event[];
      const mine = ev.filter((e) => e.entity?.id === id && e.action === 'database_update').map((e) => e.message ?? '');
      if (phase.placed === undefined && mine.some((m) => m.includes(`placed on agent ${spare.name}`))) phase.placed = since();
      if (phase.created === undefined && newNode()) phase.created = since();
      if (phase.replicating === undefined && mine.some((m) => /rebuilt.*rejoined as a replica/.test(m))) phase.replicating = since();
      const caught = mine.find((m) => m.includes(`on agent ${spare.name} caught up`));
      if (phase.caughtUp === undefined && caught) {
        phase.caughtUp = since();
        caughtUpMsg = caught;
      }
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body?.members ?? {});
      const on = new Set(m.map((x) => f.hostOf(x)?.name));
      if (r.body?.status === 'active' && m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name)) healed = r.body;
      if (Date.now() - lastPrint >= 5000 || healed) {
        lastPrint = Date.now();
        const cpu = f.agents.filter((h) => h !== lost).map((h) => `${h.name} ${(treeCpuSeconds(pids[h.name]) - cpu0[h.name]!).toFixed(1)}`).join(', ');
        console.log(`  +${since().toFixed(1)} s: ${r.body?.status}, new node's app/t.ibd ${ibdMb(newDir).toFixed(0)} of ${sourceMb.toFixed(0)} MB; CPU s so far: ${cpu}; load ${loadavg()[0]!.toFixed(1)}`);
      }
    }
    const active = since();
    const cpu = Object.fromEntries(f.agents.filter((h) => h !== lost).map((h) => [h.name, treeCpuSeconds(pids[h.name]) - cpu0[h.name]!]));
    const load1 = loadavg()[0]!;

    // The rows on the new member, and writes through hosts.primary still acknowledged.
    const newMember = Object.keys(healed.members).find((m) => f.hostOf(m) === spare)!;
    const direct = await mysqlClient(call, f.cl, id, newMember);
    const [got] = await until('the new member\'s checksum', () => direct.sql(TABLE_SUM), 600_000, 1000);
    const rowsOk = String(got.n) === String(want.n) && String(got.sum) === String(want.sum);
    const okAfter = Date.now();
    await until('writes through hosts.primary after the heal', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 120_000, 200);
    const failed = attempts(loop).filter((a) => a.start >= cutAt && !a.ok).length;

    const seedS = phase.caughtUp !== undefined && phase.created !== undefined ? phase.caughtUp - phase.created : undefined;
    onFigure({
      mb, lost: lose, ...phase, active, cpu, load1,
      ...(seedS !== undefined ? { seedMbPerS: mb / seedS } : {}),
      note: `${got.n} of ${want.n} rows, checksum ${rowsOk ? 'matches' : 'DIFFERS'}; ${failed} failed writes through hosts.primary after the cut; ${caughtUpMsg}`,
    });
    await loop.kill();
    if (!rowsOk) throw new Error(`the new member's rows differ from the primary's (${got.n}/${got.sum} against ${want.n}/${want.sum})`);
  } catch (err) {
    console.error(f.explain());
    throw err;
  } finally {
    await f.close();
  }
}
