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
 * The agents share a real object store (Swift + s3api over TLS, `startHostsFleet`'s `store`), and
 * before the host goes the run waits until the primary's archive has stored a physical base at or
 * past the load's position (its 64 MB rule takes one after a load that size; archiver.ts), so a
 * re-placed member is seeded from that base and replicates only the rest from the primary
 * (agent/database/rejoin.ts, agent/binlog/member-seed.ts); the seed's MB/s is the data's MB over
 * the time from the node's creation to caught up; the new node's app/t.ibd size is printed as it grows, with the CPU
 * seconds of each agent host's process tree (agent, mariadbd and their children) meanwhile. The
 * rows are then checked on the new member (count and CRC32 sum against the primary's).
 */
import { copyFileSync, existsSync, mkdtempSync, readdirSync, statSync, writeFileSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { createS3Stores, loadStoreCredentials, parseStoreUrl } from '../../agent/backup/s3-store.js';
import { gtidLe } from '../../agent/binlog/chain.js';
import { until } from '../../test/helpers/lab.js';
import { MYSQL, spreadUnderWrites, startHostsFleet, type HostsFleet } from '../../test/helpers/fleet-hosts.js';
import { attempts, mysqlClient } from '../../test/helpers/fleet-clients.js';
import { cleanHosts } from '../../test/helpers/hosts.js';
import { onStop } from '../common/stops.js';
import { loadSql, TABLE_SUM } from './fork.js';
import { treeCpuSeconds } from './store.js';

export interface ReplaceFigure {
  mb: number;
  lost: 'primary' | 'replica';
  /**
   * Seconds after the declaration, each phase (undefined when it was never seen): the control
   * plane placed the member on the spare host; its agent created and secured the node; attached it
   * to the primary (replication threads running); the control plane saw it caught up with the
   * primary's position at placement; the API first showed `active` with three members on three
   * hosts (it does as soon as the new member reports, before it has caught up); `whole`: both.
   */
  placed?: number;
  created?: number;
  replicating?: number;
  caughtUp?: number;
  active?: number;
  whole: number;
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

/** The agents' --binlog-archive-interval (seconds): how soon the archive sees the load. */
const ARCHIVE_S = 10;

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
const MB = 1048576;

/** Runs the re-placement for each size, handing each figure to `onFigure` as it is measured. */
export async function measureReplace(sizesMb: number[], lose: 'primary' | 'replica', onFigure: (f: ReplaceFigure) => void): Promise<void> {
  for (const mb of sizesMb) await measureOne(mb, lose, onFigure);
}

interface LogLine { time: number; msg: string; database?: number; action?: unknown; ms?: number }

/** The JSON lines of a fulcrum process's output (pino), others skipped. */
function logLines(out: string): LogLine[] {
  const lines: LogLine[] = [];
  for (const l of out.split('\n')) {
    if (!l.startsWith('{')) continue;
    try {
      lines.push(JSON.parse(l) as LogLine);
    } catch {
      // a line cut by the output's 1 MB window
    }
  }
  return lines;
}

async function measureOne(mb: number, lose: 'primary' | 'replica', onFigure: (f: ReplaceFigure) => void): Promise<void> {
  const starting = startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, store: { archiveS: ARCHIVE_S } });
  let up: HostsFleet | undefined;
  // The finally below and a signal (bench/common/stops.ts) run this same stop, once. The hosts'
  // namespaces, veths, bridge and FORWARD rule, the mariadbd processes in them (sessions of their
  // own), the object store and the folder are not the bench's process group's to stop.
  const stop = onStop(`the re-placement fleet (netns ${PREFIX}-*, its object store and folder)`, async () => {
    if (up) return keepOutputAndClose(up, mb);
    // A signal while the fleet starts: its hosts go first, which fails the start at its next
    // step, and the start then stops what it had started (startHostsFleet's own catch).
    await cleanHosts(PREFIX);
    await starting.then((f) => f.close(), () => undefined);
  });
  const f: HostsFleet = (up = await starting);
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
    // The position the load ended at, read before anything else: the write loop moves the
    // primary's position on every 100 ms, so a position read after the members caught up was past
    // every base the load's own binlog had triggered, and no more came (a new base waits for 64 MB
    // more binlog, which the write loop takes hours to write): two runs waited idle for it.
    const [{ p: loaded }] = await until('the primary\'s position after the load', () => primaryClient.sql('SELECT @@gtid_binlog_pos AS p'), 120_000, 1000);
    const [want] = await until('the primary\'s checksum', () => primaryClient.sql(TABLE_SUM), 600_000, 1000);
    console.log(`bench/provision replace (${mb} MB): ${load.rows} rows loaded in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    // Every member holds the whole load before a host goes: the new member's seed is then the
    // only copy being made.
    for (const m of members) {
      const c = m === oldPrimary ? primaryClient : await mysqlClient(call, f.cl, id, m);
      await until(`every row on member ${m}`, async () => (await c.sql('SELECT COUNT(*) AS n FROM app.t'))?.[0]?.n === load.rows, 1_800_000, 2000);
    }

    // A physical base at or past the load's end: the new member is seeded from it. When the
    // archive's last base came before the end (less than 64 MB of the load's binlog after it, or
    // it would have taken another), the newest one after 3 minutes: the member then replicates
    // the rest from the primary, as it would in service, and the line below says so.
    const store = f.store!;
    const reader = createS3Stores({
      ...parseStoreUrl(`s3://${store.bucket}/us-east`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
      credentials: loadStoreCredentials(store.credentialsFile),
    });
    const tb = Date.now();
    const physical = async () => (await reader.backups.list(id)).filter((m) => m.type === 'base' && m.format.startsWith('mariadb-backup'));
    const past = await until('a physical base past the load', async () => (await physical()).find((m) => gtidLe(String(loaded), m.snapshotGtid ?? '')), 180_000, 2000)
      .catch(() => undefined);
    const base = past ?? (await until('a physical base', async () => (await physical()).sort((a, b) => b.createdMs - a.createdMs)[0], 1_800_000, 2000));
    await reader.close();
    console.log(`bench/provision replace (${mb} MB): physical base ${base.id} (${(base.sizeBytes / MB).toFixed(1)} MB stored) at ${base.snapshotGtid}${past ? '' : ` (before the load's end at ${loaded}: the new member replicates the rest from the primary)`}, ${((Date.now() - tb) / 1000).toFixed(1)} s after the load was everywhere`);

    const lostMember = lose === 'primary' ? oldPrimary : members.find((m) => db.members[m] !== 'primary')!;
    const lost = f.hostOf(lostMember)!;
    const pids = Object.fromEntries(f.agents.map((h) => [h.name, procs[h.name]!.proc.pid!]));
    const cpu0 = Object.fromEntries(f.agents.map((h) => [h.name, treeCpuSeconds(pids[h.name])]));
    const newDir = join(f.dir, spare.name, 'databases', String(id));
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

    // 3. Sampled every 500 ms until the control plane has seen the new member caught up and the
    // API shows the database active with three members on three hosts, none the lost one (the API
    // shows it active as soon as the new member reports, before it has caught up).
    let lastPrint = 0;
    let active: number | undefined;
    let healed: any;
    const cpLine = (msg: string) => logLines(f.fleet.cp.output()).find((l) => l.msg === msg && l.database === id && l.time >= at);
    for (const deadline = Date.now() + 3_600_000; !(healed && cpLine('re-placed member caught up')); await sleep(500)) {
      if (Date.now() > deadline) throw new Error(`timed out: database ${id} whole again after ${lost.name} was lost`);
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body?.members ?? {});
      const on = new Set(m.map((x) => f.hostOf(x)?.name));
      if (r.body?.status === 'active' && m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name)) {
        healed = r.body;
        active ??= since();
      }
      if (Date.now() - lastPrint >= 5000) {
        lastPrint = Date.now();
        const cpu = f.agents.filter((h) => h !== lost).map((h) => `${h.name} ${(treeCpuSeconds(pids[h.name]) - cpu0[h.name]!).toFixed(1)}`).join(', ');
        console.log(`  +${since().toFixed(1)} s: ${r.body?.status}, new node's app/t.ibd ${ibdMb(newDir).toFixed(0)} of ${sourceMb.toFixed(0)} MB; CPU s so far: ${cpu}; load ${loadavg()[0]!.toFixed(1)}`);
      }
    }
    const whole = since();
    const cpu = Object.fromEntries(f.agents.filter((h) => h !== lost).map((h) => [h.name, treeCpuSeconds(pids[h.name]) - cpu0[h.name]!]));
    const load1 = loadavg()[0]!;
    // The phases from the logs (milliseconds there): the control plane's, the new host's agent's.
    const rel = (l?: LogLine) => (l ? (l.time - at) / 1000 : undefined);
    const spareLog = logLines(procs[spare.name]!.output()).filter((l) => l.database === id && l.time >= at);
    const created = spareLog.find((l) => l.msg === 'provisioned the local members of a cluster spread over agents');
    const phase = {
      placed: rel(cpLine('member re-placed')),
      created: rel(created),
      replicating: rel(spareLog.find((l) => l.msg === 'action done' && (l.action as { kind?: string })?.kind === 'rejoin' && (!created || l.time >= created.time))),
      caughtUp: rel(cpLine('re-placed member caught up')),
      active,
    };
    console.log(`bench/provision replace (${mb} MB): the new host's agent, database ${id}, seconds after the declaration:\n${spareLog.map((l) => `  +${rel(l)!.toFixed(1)} ${l.msg}${l.action ? ` ${JSON.stringify(l.action)}` : ''}${l.ms !== undefined ? ` (${l.ms} ms)` : ''}`).join('\n')}`);

    // The rows on the new member (it has caught up), and writes through hosts.primary still acknowledged.
    const newMember = Object.keys(healed.members).find((m) => f.hostOf(m) === spare)!;
    const direct = await mysqlClient(call, f.cl, id, newMember);
    const [got] = await until('the new member\'s checksum', () => direct.sql(TABLE_SUM), 600_000, 1000);
    const rowsOk = String(got.n) === String(want.n) && String(got.sum) === String(want.sum);
    const okAfter = Date.now();
    await until('writes through hosts.primary after the heal', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 120_000, 200);
    const failed = attempts(loop).filter((a) => a.start >= cutAt && !a.ok).length;

    const seedS = phase.caughtUp !== undefined && phase.created !== undefined ? phase.caughtUp - phase.created : undefined;
    onFigure({
      mb, lost: lose, ...phase, whole, cpu, load1,
      ...(seedS !== undefined ? { seedMbPerS: mb / seedS } : {}),
      note: `${got.n} of ${want.n} rows, checksum ${rowsOk ? 'matches' : 'DIFFERS'}; ${failed} failed writes through hosts.primary after the cut`,
    });
    await loop.kill();
    if (!rowsOk) throw new Error(`the new member's rows differ from the primary's (${got.n}/${got.sum} against ${want.n}/${want.sum})`);
  } finally {
    await stop();
  }
}

/** Keeps every process's output and the servers' error logs in a folder of their own, then stops the fleet. */
async function keepOutputAndClose(f: HostsFleet, mb: number): Promise<void> {
  const { procs } = f.fleet;
  // Every process's output (its last MB) outlives the run: where a phase's time went is there.
  const logDir = mkdtempSync(join(tmpdir(), 'bench-replace-log-'));
  writeFileSync(join(logDir, 'cp.log'), f.fleet.cp.output());
  for (const [name, p] of Object.entries(procs)) writeFileSync(join(logDir, `${name}.log`), p.output());
  // And each server's error log (runtime/nodes/NAME/error.log under each agent host's folder).
  for (const h of f.agents) {
    const nodes = join(f.dir, h.name, 'runtime', 'nodes');
    for (const n of existsSync(nodes) ? readdirSync(nodes) : []) {
      if (existsSync(join(nodes, n, 'error.log'))) copyFileSync(join(nodes, n, 'error.log'), join(logDir, `${h.name}-${n}-error.log`));
    }
  }
  console.log(`bench/provision replace (${mb} MB): the fleet's output is kept in ${logDir}`);
  await f.close();
}
