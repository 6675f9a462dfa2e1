/**
 * bench/provision, object-store part: what the backup store (docs/agent.md, "Backup store")
 * costs and how fast a database comes back out of it. Everything runs the real way: the real
 * Swift + s3api store over TLS (test/helpers/object-store.ts, the tests' own helper), the control
 * plane and two agents in this process (distinct ids, one region, both on that store, each with
 * its own loopback node pool), real mariadbd processes. For a database of N MB:
 *
 *  a) upload: the archive round after the load, asked for (RunningAgent.archiveNow: its binlog
 *     segments, then a physical base, whatever binlog followed the base taken during the load) and a
 *     logical dump (a snapshot through the REST API), each with its MB/s, the CPU seconds of the
 *     whole process tree per GB and the peak RSS of this Node process meanwhile (the agents'
 *     streams, zstd and encryption run in it; so do the control plane and the other agent);
 *  b) fork from the store: agent A stopped and its nodes removed, a fork to a second of the
 *     source's binlog tail goes to agent B (it never ran the source) and is built from the
 *     physical base (its accounts reset offline, agent/binlog/physical-seed.ts) and the archived
 *     segments: seconds to `active`, rows checked (count and CRC32 sum), the agent's steps;
 *  c) re-placement of a 3-node member: not here, in replace.ts (below);
 *  d) 1-node recovery: agent A declared lost, the source rebuilt on B from its newest physical
 *     base and every segment: seconds from the declaration to `active`, every row checked.
 *
 * Why not c): members of a cluster spread over hosts need node addresses the other hosts reach,
 * and an agent whose node pool is loopback does not offer to run them (agent.ts,
 * `membersAcrossHosts`); the re-placement runs on netns hosts (replace.ts).
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { pino } from 'pino';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startAgent, type RunningAgent } from '../../agent/main.js';
import { createLogger, silentLogger } from '../../lib/logger.js';
import { createS3Stores, loadStoreCredentials, parseStoreUrl, type S3StoreConfig } from '../../agent/backup/s3-store.js';
import { gtidLe } from '../../agent/binlog/chain.js';
import { startObjectStore } from '../../test/helpers/object-store.js';
import { apiClient } from '../common/fulcrum.js';
import { onStop } from '../common/stops.js';
import { loadSql, ROW_SQL, TABLE_SUM } from './fork.js';

/** One printed figure: what, how much, the target it is held to ('-' when none). */
export interface StoreFigure {
  mb: number;
  what: string;
  seconds: number;
  /** MB/s of the database's data (not of the stored, compressed bytes), when it makes sense. */
  mbPerS?: number;
  storedMb?: number;
  cpuPerGb?: number;
  peakRssMb?: number;
  targetS?: number;
  load1: number;
  note: string;
}

const wire = (ms: number) => new Date(ms).toISOString().slice(0, 19);
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch((e: Error) => (e.message.startsWith('failed') ? Promise.reject(e) : undefined));
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await sleep(200);
  }
}

const TICKS = Number(execFileSync('getconf', ['CLK_TCK']).toString().trim()) || 100;

/**
 * CPU seconds used so far by process `root` (this one by default) and everything under it: the
 * live descendants (mariadbd, the Swift servers) read from /proc, and the children already reaped
 * (mariadb-dump, mariadb-backup, mariadb-binlog...) from their parents' cutime/cstime.
 */
export function treeCpuSeconds(root = process.pid): number {
  const stats = new Map<number, { ppid: number; ticks: number; childTicks: number }>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const raw = readFileSync(`/proc/${name}/stat`, 'utf8');
      // Fields after the command (which may hold spaces) in parentheses.
      const f = raw.slice(raw.lastIndexOf(')') + 2).split(' ');
      stats.set(Number(name), { ppid: Number(f[1]), ticks: Number(f[11]) + Number(f[12]), childTicks: Number(f[13]) + Number(f[14]) });
    } catch {
      // exited while we read
    }
  }
  const mine = new Set([root]);
  for (let grew = true; grew;) {
    grew = false;
    for (const [pid, s] of stats) {
      if (!mine.has(pid) && mine.has(s.ppid)) {
        mine.add(pid);
        grew = true;
      }
    }
  }
  let ticks = 0;
  // Children's reaped children count in their own cutime: every process's childTicks, once.
  for (const pid of mine) ticks += stats.get(pid)!.ticks + stats.get(pid)!.childTicks;
  return ticks / TICKS;
}

/** Peak RSS of this process between start() and stop(), sampled every 100 ms. */
function rssPeak(): { stop(): number } {
  let peak = process.memoryUsage.rss();
  const t = setInterval(() => (peak = Math.max(peak, process.memoryUsage.rss())), 100);
  return { stop: () => (clearInterval(t), peak = Math.max(peak, process.memoryUsage.rss()), peak / 1048576) };
}

/** Runs the store scenarios for each size, handing each figure to `onFigure` as it is measured. */
export async function measureStore(sizesMb: number[], onFigure: (f: StoreFigure) => void): Promise<void> {
  for (const mb of sizesMb) await measureOne(mb, onFigure);
}

/**
 * Where the fork's time went, from agent B's log line "fork: base loaded" (replay.ts): waiting for
 * the plan, verifying the base, then physical-seed.ts's steps (download+unpack, prepare, accounts
 * reset, placing, starting, replication reset), and the whole seeding.
 */
async function forkSteps(agentLog: string, forkId: number): Promise<string> {
  const find = () => readFileSync(agentLog, 'utf8').split('\n').map((l) => { try { return JSON.parse(l); } catch { return undefined; } })
    .find((x) => x?.msg === 'fork: base loaded' && x.database === forkId);
  // The log is written asynchronously: give it a moment to reach the file.
  let line = find();
  for (let i = 0; !line && i < 20; i++) { await sleep(250); line = find(); }
  if (!line) return 'steps: not in the log';
  const steps = Object.entries((line.steps ?? {}) as Record<string, number>).map(([k, v]) => `${k.replace(/Ms$/, '')} ${(v / 1000).toFixed(1)}`).join(', ');
  return `base loaded in ${(line.ms / 1000).toFixed(1)} s (${steps} s)`;
}

async function measureOne(mb: number, onFigure: (f: StoreFigure) => void): Promise<void> {
  const octet = 100 + Math.floor(Math.random() * 150);
  const store = await startObjectStore({ host: `127.84.${octet}.1` });
  const dirs = {
    cp: mkdtempSync(join(tmpdir(), 'bench-store-cp-')),
    a: mkdtempSync(join(tmpdir(), 'bench-store-agent-a-')),
    b: mkdtempSync(join(tmpdir(), 'bench-store-agent-b-')),
    log: mkdtempSync(join(tmpdir(), 'bench-store-log-')),
  };
  // The agents' log (info and up) goes to a file that outlives a failed run: where a step's time
  // went, or why it never ended, is there.
  const agentLog = join(dirs.log, 'agents.log');
  console.log(`bench/provision store (${mb} MB): the agents' log goes to ${agentLog}`);
  const logger = createLogger('agent', { level: 'info', destination: pino.multistream([{ level: 'info', stream: pino.destination({ dest: agentLog, sync: false }) }]) });
  const cfg: S3StoreConfig = {
    ...parseStoreUrl(`s3://${store.bucket}/bench`), endpoint: store.endpoint, region: store.region, pathStyle: true, ca: store.ca,
    credentials: loadStoreCredentials(store.credentialsFile),
  };
  const reader = createS3Stores(cfg);
  const agents: RunningAgent[] = [];
  let started: ControlPlane | undefined;
  // The finally below and a signal (bench/common/stops.ts) run this same stop, once: the agents'
  // mariadbd processes run in sessions of their own and outlive the bench otherwise.
  const stop = onStop(`the object store, control plane and agents of the ${mb} MB store run`, async () => {
    for (const a of agents) {
      await a.close();
      for (const n of await a.runtime.list({})) await a.runtime.remove(n.name, { withData: true });
    }
    await started?.close();
    reader.close();
    await store.stop();
    for (const d of [dirs.cp, dirs.a, dirs.b]) rmSync(d, { recursive: true, force: true, maxRetries: 3 });
    if (!existsSync(agentLog) || statSync(agentLog).size === 0) rmSync(dirs.log, { recursive: true, force: true });
    else console.log(`bench/provision store: the agents' log is kept: ${agentLog}`);
  });
  const cp = (started = await startControlPlane({ stateDir: dirs.cp, apiPort: 0, grpcPort: 0, databasePool: `127.78.${octet}.0/24`, logger: silentLogger() }));
  const api = apiClient(cp.apiUrl, cp.adminToken);
  const start = async (id: string, stateDir: string, pool: string) => {
    const join = (await cp.context.fleet.createJoinToken({ role: 'agent', id, region: 'us-east' })).token;
    const a = await startAgent({ join, controlPlane: cp.grpcAddress, stateDir, runtime: 'process', nodeAddressPool: pool, logger, binlogArchiveMs: 5000, backupStore: cfg });
    agents.push(a);
    await until(async () => ((await api('GET', '/fulcrum/agents')).data.find((x: any) => x.id === id && x.connected && x.engines?.length)), 60_000, `agent ${id} connected`);
    return a;
  };
  const get = (id: number) => api('GET', `/databases/mysql/instances/${id}`);
  const waitActive = (id: number, ms: number, pool?: string) => until(async () => {
    const d = await get(id);
    if (d.status === 'failed') throw new Error(`failed: database ${id}`);
    const members = Object.keys(d.members ?? {});
    return d.status === 'active' && members.length > 0 && (!pool || members.every((m) => m.startsWith(pool))) ? d : undefined;
  }, ms, `database ${id} active`);
  const connect = async (d: any) => {
    const creds = await api('GET', `/databases/mysql/instances/${d.id}/credentials`);
    const ca = Buffer.from((await api('GET', `/databases/mysql/instances/${d.id}/ssl`)).ca_certificate, 'base64').toString();
    // Straight to the primary member: this bench runs no data plane to serve hosts.primary.
    const primary = Object.entries(d.members as Record<string, string>).find(([, role]) => role === 'primary')![0];
    return mysql.createConnection({ host: primary, port: d.port, user: creds.username, password: creds.password, ssl: { ca } });
  };
  const figure = (f: Omit<StoreFigure, 'mb' | 'load1'>) => onFigure({ mb, load1: loadavg()[0]!, ...f });
  const gb = mb / 1024;
  try {
    const agentA = await start('bench-store-a', dirs.a, `127.79.${octet}.0/24`);
    const engine = (await api('GET', '/fulcrum/agents')).data.find((x: any) => x.id === 'bench-store-a').engines[0].id as string;
    const src = await waitActive((await api('POST', '/databases/mysql/instances', {
      label: `bench-store-${mb}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'],
    })).id, 120_000);
    // B joins once the source is placed on A: it must never have run the source.
    await start('bench-store-b', dirs.b, `127.80.${octet}.0/24`);
    const c = await connect(src);
    const load = loadSql(mb);
    const rows = load.rows;
    for (const stmt of [...load.setup, ...load.inserts]) await c.query(stmt);
    const [[{ pos }]] = (await c.query('SELECT @@gtid_binlog_pos AS pos')) as any;

    // a) The archive round after the load, asked for (not waited for on the timer: a base taken
    // during the load with less than 64 MB of binlog after it made the archive take none for a
    // long time): its segments, then a physical base at or after the load, all in the store.
    let cpu0 = treeCpuSeconds();
    let rss = rssPeak();
    let t0 = Date.now();
    await agentA.archiveNow(src.id, { physicalBase: true });
    const base = await until(async () => (await reader.backups.list(src.id))
      .find((m) => m.type === 'base' && m.format.startsWith('mariadb-backup+') && gtidLe(String(pos), m.snapshotGtid ?? '')), 120_000, 'a physical base in the store after the load');
    let cpu = treeCpuSeconds() - cpu0;
    const roundS = (Date.now() - t0) / 1000;
    const segs = (await reader.segments.list(src.id));
    const segMb = segs.reduce((n, s) => n + s.sizeBytes, 0) / 1048576;
    const baseS = (base.finishedMs - base.createdMs) / 1000;
    figure({ what: 'physical base uploaded (copy, zstd, encrypt, multipart upload)', seconds: baseS, mbPerS: mb / baseS, storedMb: base.sizeBytes / 1048576, peakRssMb: rss.stop(), note: `backup ${base.id}` });
    figure({ what: 'archive round after the load (binlog segments, then that base)', seconds: roundS, mbPerS: mb / roundS, storedMb: segMb + base.sizeBytes / 1048576, cpuPerGb: cpu / gb, note: `${segs.length} segments, ${segMb.toFixed(1)} MB stored` });

    cpu0 = treeCpuSeconds();
    rss = rssPeak();
    t0 = Date.now();
    await api('POST', `/databases/mysql/instances/${src.id}/backups`, { label: 'bench_dump', target: 'primary' });
    const dump = await until(async () => (await reader.backups.list(src.id)).find((m) => m.type === 'snapshot'), 3_600_000, 'the dump in the store');
    cpu = treeCpuSeconds() - cpu0;
    const dumpWallS = (Date.now() - t0) / 1000;
    const dumpS = (dump.finishedMs - dump.createdMs) / 1000;
    figure({ what: 'logical dump uploaded (mariadb-dump, zstd, encrypt, multipart upload)', seconds: dumpS, mbPerS: mb / dumpS, storedMb: dump.sizeBytes / 1048576, cpuPerGb: cpu / gb, peakRssMb: rss.stop(), note: `${dumpWallS.toFixed(1)} s from the API call to listed` });
    await until(async () => ((await get(src.id)).status === 'active' ? true : undefined), 120_000, 'source active after its snapshot');

    // The binlog tail the fork stops in: small writes for 4 s, the fork's second in their middle.
    let tailRows = 0;
    const tailEnd = Date.now() + 4000;
    while (Date.now() < tailEnd) await c.query(`INSERT INTO app.t (id, cat, num, pad, at) SELECT ?, ${ROW_SQL}, UNIX_TIMESTAMP()`, [rows + ++tailRows]);
    const lastWrite = Date.now();
    const T = Math.floor((lastWrite - 2000) / 1000) * 1000;
    const [[want]] = (await c.query(`${TABLE_SUM} WHERE at < ?`, [T / 1000])) as any;
    const [[all]] = (await c.query(TABLE_SUM)) as any;
    await c.end();
    // Every write archived before A goes: the recovery then must hold every row. A round closes a
    // file only when it holds transactions, so an idle database gets exactly one segment after the
    // tail; its closedMs is read before its flush, and everything committed before it is in it.
    await agentA.archiveNow(src.id);
    await until(async () => ((await reader.segments.list(src.id)).some((s) => s.closedMs >= lastWrite) ? true : undefined), 120_000, 'a segment closed after the last write');

    // A's host "goes": its agent stopped and its nodes removed with their data.
    await agentA.close();
    agents.splice(agents.indexOf(agentA), 1);
    for (const n of await agentA.runtime.list({})) await agentA.runtime.remove(n.name, { withData: true });
    await until(async () => ((await api('GET', '/fulcrum/agents')).data.find((x: any) => x.id === 'bench-store-a' && !x.connected) ? true : undefined), 60_000, 'agent A disconnected');

    // b) A fork to second T, placed on B (the source's agent is away): from the base and segments.
    cpu0 = treeCpuSeconds();
    t0 = Date.now();
    const fork = await api('POST', '/databases/mysql/instances', {
      label: `bench-store-fork-${mb}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'], fork: { source: src.id, restore_time: wire(T) },
    });
    const forked = await waitActive(fork.id, 3_600_000, `127.80.${octet}.`);
    const forkS = (Date.now() - t0) / 1000;
    cpu = treeCpuSeconds() - cpu0;
    const fc = await connect(forked);
    const [[got]] = (await fc.query(TABLE_SUM)) as any;
    await fc.end();
    const forkOk = String(got.n) === String(want.n) && String(got.sum) === String(want.sum);
    const forkBase = JSON.parse(readFileSync(join(dirs.b, 'databases', String(fork.id), 'state.json'), 'utf8')).forkBase;
    figure({ what: 'fork from the store on agent B', seconds: forkS, mbPerS: mb / forkS, cpuPerGb: cpu / gb, targetS: mb >= 1000 ? 60 : undefined,
      note: `${forkBase?.kind ?? '?'} base ${forkBase?.backupId ?? '?'}; ${got.n} of ${want.n} rows, checksum ${forkOk ? 'matches' : 'DIFFERS'}; ${await forkSteps(agentLog, fork.id)}` });
    await api('DELETE', `/databases/mysql/instances/${fork.id}`);
    await until(async () => ((await api('GET', '/databases/mysql/instances')).data.some((d: any) => d.id === fork.id) ? undefined : true), 300_000, 'fork deleted');

    // d) A declared lost: the source rebuilt on B from its newest physical base and every segment.
    cpu0 = treeCpuSeconds();
    t0 = Date.now();
    await api('POST', '/fulcrum/agents/bench-store-a/lost');
    const back = await waitActive(src.id, 3_600_000, `127.80.${octet}.`);
    const recoverS = (Date.now() - t0) / 1000;
    cpu = treeCpuSeconds() - cpu0;
    const rc = await connect(back);
    const [[now]] = (await rc.query(TABLE_SUM)) as any;
    await rc.end();
    const recOk = String(now.n) === String(all.n) && String(now.sum) === String(all.sum);
    const recBase = JSON.parse(readFileSync(join(dirs.b, 'databases', String(src.id), 'state.json'), 'utf8')).forkBase;
    figure({ what: '1-node recovery on agent B after A declared lost', seconds: recoverS, mbPerS: mb / recoverS, cpuPerGb: cpu / gb, targetS: mb >= 1024 ? 90 : undefined,
      note: `${recBase?.kind ?? '?'} base ${recBase?.backupId ?? '?'}; ${now.n} of ${all.n} rows, checksum ${recOk ? 'matches' : 'DIFFERS'}` });
    if (!forkOk || !recOk) throw new Error(`rows differ (fork ${forkOk ? 'ok' : 'differs'}, recovery ${recOk ? 'ok' : 'differs'})`);
  } finally {
    await stop();
  }
}
