/**
 * bench/provision: seconds from `POST /databases/mysql/instances` to `active`, and to the first
 * successful query through `hosts.primary` (TLS verified against `/ssl`), for 1-node and 3-node
 * semi_synch clusters on each runtime. The control plane and agent run the real way (REST API,
 * gRPC, real mariadbd processes or containers); nothing is shortcut.
 *
 *   npm run bench:provision -- [--rounds N] [--runtimes process,docker] [--fork-mb 10,100,1024] [--store-mb 100,1024] [--replace-mb 100,1024] [--replace-lose replica|primary] [--codec-mb 1024] [--only provision|fork|store|replace|codec]
 *
 * Goals (issue 7): 1 node active < 10 s and 3 nodes < 30 s with the process runtime. Then the
 * fork part (fork.ts): a fork's time to active against the source's data size (a 1 GB fork under
 * 60 s), on the first runtime listed. Last the object-store part (store.ts, process runtime): a
 * database's dump and physical base uploaded to a real S3-compatible store, a fork from the store
 * on another agent (a 1 GB fork under 60 s) and a 1-node recovery there after its host is declared
 * lost (1 GB under 90 s), with MB/s, CPU seconds per GB and peak RSS. Then the re-placement part
 * (replace.ts, netns hosts, needs root): a 3-node database's member whose host is declared lost,
 * placed on a fourth host and seeded there (1 GB: a new member seeded in under 60 s). `--only codec`
 * (store-codec.ts, no servers): the CPU per GB of sealing and reading back a dump-like and a
 * binlog-like stream, before and after zstd and 1 MiB frames.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startAgent, type RunningAgent } from '../../agent/main.js';
import { silentLogger } from '../../lib/logger.js';
import { apiClient, repoRoot, stopAgentAndControlPlane } from '../common/fulcrum.js';
import { fmt, median, table } from '../common/stats.js';
import { measureForks, type ForkSample } from './fork.js';
import { measureStore, type StoreFigure } from './store.js';
import { measureReplace, type ReplaceFigure } from './replace.js';
import { measureCodec, type CodecFigure } from './store-codec.js';
import { runBench } from '../common/processes.js';
import { onStop, stopping } from '../common/stops.js';

const args = process.argv.slice(2);
const flag = (name: string, dflt: string) => {
  const i = args.indexOf(`--${name}`);
  return i >= 0 && args[i + 1] ? args[i + 1]! : dflt;
};
const rounds = Number(flag('rounds', '3'));
const runtimes = flag('runtimes', 'process,docker').split(',') as ('process' | 'docker')[];
const forkSizes = flag('fork-mb', '10,100,1024').split(',').map(Number).filter((n) => n > 0);
const storeSizes = flag('store-mb', '1024').split(',').map(Number).filter((n) => n > 0);
const replaceSizes = flag('replace-mb', '1024').split(',').map(Number).filter((n) => n > 0);
const replaceLose = flag('replace-lose', 'replica') === 'primary' ? 'primary' : 'replica';
const codecSizes = flag('codec-mb', '1024').split(',').map(Number).filter((n) => n > 0);
const only = flag('only', '');

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function dockerReady(): boolean {
  try {
    execFileSync('bash', [join(repoRoot(), 'scripts', 'start-dockerd.sh')], { stdio: 'ignore' });
    execFileSync('bash', [join(repoRoot(), 'scripts', 'build-mysql-image.sh')], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

interface Sample { active: number; query: number }

async function measure(runtime: 'process' | 'docker', clusterSize: 1 | 3): Promise<Sample[]> {
  const cpDir = mkdtempSync(join(tmpdir(), 'bench-provision-cp-'));
  const agentDir = mkdtempSync(join(tmpdir(), 'bench-provision-agent-'));
  const octet = 100 + Math.floor(Math.random() * 150);
  let started: { cp?: ControlPlane; agent?: RunningAgent } = {};
  // The finally below and a signal (bench/common/stops.ts) run this same stop, once: the agent's
  // mariadbd processes (sessions of their own) or containers outlive the bench otherwise.
  const stop = onStop(`the ${runtime} agent's nodes, the control plane and their folders`, async () => {
    const parts = started;
    started = {};
    await stopAgentAndControlPlane(parts, [cpDir, agentDir]);
  });
  const cp = (started.cp = await startControlPlane({ stateDir: cpDir, apiPort: 0, grpcPort: 0, databasePool: `127.78.${octet}.0/24`, logger: silentLogger() }));
  const joinToken = (await cp.context.fleet.createJoinToken({ role: 'agent', id: `bench-${runtime}`, region: '*' })).token;
  started.agent = await startAgent({ join: joinToken, controlPlane: cp.grpcAddress, stateDir: agentDir, runtime, nodeAddressPool: `127.79.${octet}.0/24`, logger: silentLogger() });
  const api = apiClient(cp.apiUrl, cp.adminToken);
  const samples: Sample[] = [];
  try {
    const agents = await until(async () => {
      const a = (await api('GET', '/fulcrum/agents')).data.find((x: any) => x.connected && x.engines?.length);
      return a;
    }, 30_000, 'agent connected with an engine');
    const engine = agents.engines[0].id as string;
    for (let i = 0; i < rounds; i++) {
      const t0 = performance.now();
      const db = await api('POST', '/databases/mysql/instances', {
        label: `bench-${clusterSize}-${i}`, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: clusterSize,
        ...(clusterSize === 3 ? { replication_type: 'semi_synch' } : {}), allow_list: ['0.0.0.0/0'],
      });
      const active = await until(async () => {
        const d = await api('GET', `/databases/mysql/instances/${db.id}`);
        if (d.status === 'failed') throw new Error('failed');
        return d.status === 'active' ? d : undefined;
      }, 120_000, `database ${db.id} active`);
      const tActive = performance.now();
      const creds = await api('GET', `/databases/mysql/instances/${db.id}/credentials`);
      const ca = Buffer.from((await api('GET', `/databases/mysql/instances/${db.id}/ssl`)).ca_certificate, 'base64').toString();
      await until(async () => {
        const c = await mysql.createConnection({ host: active.hosts.primary, port: active.port, user: creds.username, password: creds.password, ssl: { ca } });
        await c.query('SELECT 1');
        await c.end();
        return true;
      }, 60_000, 'first query');
      samples.push({ active: (tActive - t0) / 1000, query: (performance.now() - t0) / 1000 });
      await api('DELETE', `/databases/mysql/instances/${db.id}`);
      await until(async () => ((await api('GET', '/databases/mysql/instances')).results === 0 ? true : undefined), 60_000, 'deleted');
    }
  } finally {
    await stop();
  }
  return samples;
}

async function main(): Promise<number> {
  // After a signal the parts below start nothing new (stopping()): the bench is on its way out.
  const rows: string[][] = [['runtime', 'nodes', 'rounds', 'active s (median)', 'first query s (median)', 'goal', 'verdict']];
  for (const runtime of only === 'fork' || only === 'store' || only === 'replace' || only === 'codec' ? [] : runtimes) {
    if (runtime === 'docker' && !dockerReady()) {
      rows.push(['docker', '-', '0', '-', '-', '-', 'dockerd or the lab image unavailable']);
      continue;
    }
    for (const size of [1, 3] as const) {
      if (stopping()) break;
      try {
        const s = await measure(runtime, size);
        const act = median(s.map((x) => x.active));
        const goal = size === 1 ? 10 : 30;
        rows.push([runtime, String(size), String(s.length), fmt(act, 2), fmt(median(s.map((x) => x.query)), 2), `< ${goal} s`,
          act < goal ? 'met' : `short by ${fmt(act - goal, 2)} s`]);
      } catch (err) {
        rows.push([runtime, String(size), '0', '-', '-', '-', `error: ${(err as Error).message}`]);
      }
    }
  }
  if (only === '' || only === 'provision') console.log(`\nbench/provision (hosted service: 15-30 minutes)\n${table(rows)}\n`);
  let forkFailed = false;
  if (!stopping() && (only === '' || only === 'fork') && forkSizes.length > 0) {
    const f: string[][] = [['runtime', 'data MB', 'rows', 'tail rows', 'load s', 'base', 'base MB', 'data/base', 'fork active s', 'load avg', 'rows in fork / expected', 'goal (1 GB)', 'verdict']];
    const row = (s: ForkSample) => [runtimes[0] ?? 'process', String(s.mb), String(s.rows), String(s.tailRows), fmt(s.loadS, 1), s.base, fmt(s.baseMb, 1), `${fmt(s.mb / Math.max(s.baseMb, 0.001), 1)}x`, fmt(s.forkS, 2), fmt(s.load1, 1), `${s.forkRows} / ${s.expectedRows}`,
      s.mb >= 1024 ? '< 60 s' : '-',
      s.forkRows !== s.expectedRows ? 'FAILED: rows differ' : s.base !== 'physical' ? `FAILED: ${s.base} base, physical expected` : s.mb >= 1024 ? (s.forkS < 60 ? 'met' : `short by ${fmt(s.forkS - 60, 1)} s`) : '-'];
    try {
      // Rows as forks finish, so a failure later still shows the figures before it.
      await measureForks(runtimes[0] ?? 'process', forkSizes, (s) => f.push(row(s)));
    } catch (err) {
      forkFailed = true;
      f.push([runtimes[0] ?? 'process', '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', `error: ${(err as Error).message}`]);
    }
    console.log(`\nbench/provision: fork to a point in time against data size\n${table(f)}\n`);
    if (forkFailed) console.error('bench/provision: FAILED: a fork did not run as measured (see the error above and the agent\'s warnings file)');
  }
  let storeFailed = false;
  if (!stopping() && (only === '' || only === 'store') && storeSizes.length > 0) {
    const t: string[][] = [['data MB', 'what', 's', 'data MB/s', 'stored MB', 'CPU s/GB', 'peak RSS MB', 'load avg', 'target', 'verdict', 'note']];
    const row = (f: StoreFigure) => [String(f.mb), f.what, fmt(f.seconds, 1), fmt(f.mbPerS ?? NaN, 1), fmt(f.storedMb ?? NaN, 1), fmt(f.cpuPerGb ?? NaN, 0), fmt(f.peakRssMb ?? NaN, 0), fmt(f.load1, 1),
      f.targetS ? `< ${f.targetS} s` : '-', f.targetS ? (f.seconds < f.targetS ? 'met' : `not met (by ${fmt(f.seconds - f.targetS, 1)} s)`) : '-', f.note];
    try {
      await measureStore(storeSizes, (f) => {
        t.push(row(f));
        console.log(`store ${f.mb} MB: ${f.what}: ${f.seconds.toFixed(1)} s; ${f.note}`);
      });
    } catch (err) {
      storeFailed = true;
      t.push(['-', 'error (below)', '-', '-', '-', '-', '-', '-', '-', '-', '-']);
      console.error(`bench/provision store: ${(err as Error).message}`);
    }
    console.log(`\nbench/provision: the object store (Swift + s3api over TLS), process runtime\n${table(t)}\n`);
    if (storeFailed) console.error('bench/provision: FAILED: the object-store part did not run as measured (see the error above and the agents\' warnings file)');
  }
  let replaceFailed = false;
  if (!stopping() && (only === '' || only === 'replace') && replaceSizes.length > 0) {
    const t: string[][] = [['data MB', 'host lost', 'placed s', 'node created s', 'replicating s', 'caught up s', 'API active s', 'whole s', 'seed MB/s', 'CPU s per agent host', 'load avg', 'target (1 GB)', 'verdict', 'note']];
    const s1 = (n?: number) => (n === undefined ? 'not seen' : fmt(n, 1));
    const row = (f: ReplaceFigure) => [String(f.mb), f.lost, s1(f.placed), s1(f.created), s1(f.replicating), s1(f.caughtUp), s1(f.active), fmt(f.whole, 1), fmt(f.seedMbPerS ?? NaN, 1),
      Object.entries(f.cpu).map(([h, c]) => `${h} ${fmt(c, 0)}`).join(', '), fmt(f.load1, 1), f.mb >= 1024 ? '< 60 s' : '-',
      f.mb >= 1024 ? (f.caughtUp !== undefined && f.caughtUp < 60 ? 'met' : `not met${f.caughtUp !== undefined ? ` (by ${fmt(f.caughtUp - 60, 1)} s)` : ''}`) : '-', f.note];
    try {
      await measureReplace(replaceSizes, replaceLose, (f) => {
        t.push(row(f));
        console.log(`replace ${f.mb} MB: caught up ${s1(f.caughtUp)} s, whole ${fmt(f.whole, 1)} s after the declaration; ${f.note}`);
      });
    } catch (err) {
      replaceFailed = true;
      t.push(['-', replaceLose, '-', '-', '-', '-', '-', '-', '-', '-', '-', '-', 'error (below)', '-']);
      console.error(`bench/provision replace: ${(err as Error).message}`);
    }
    console.log(`\nbench/provision: re-placement of a 3-node member after its host is declared lost (netns hosts, process runtime); seconds after the declaration\n${table(t)}\n`);
    if (replaceFailed) console.error('bench/provision: FAILED: the re-placement part did not run as measured (see the error and the fleet\'s output above)');
  }
  if (!stopping() && only === 'codec') {
    const t: string[][] = [['stream', 'what', 'data MB', 'stored MB', 's', 'data MB/s', 'CPU s/GB', 'load avg']];
    for (const mb of codecSizes) {
      await measureCodec(mb, (f: CodecFigure) => {
        t.push([f.stream, f.what, String(f.plainMb), fmt(f.storedMb, 1), fmt(f.seconds, 1), fmt((f.plainMb * 1.048576) / f.seconds, 0), fmt(f.cpuPerGb, 2), fmt(f.load1, 1)]);
        console.log(`codec ${f.stream}: ${f.what}: ${f.seconds.toFixed(1)} s`);
      });
    }
    console.log(`\nbench/provision: the store's CPU per byte (compress + encrypt + SHA-256; SHA-256 + decrypt + decompress), ${new Date().toISOString()}\n${table(t)}\n`);
  }
  return forkFailed || storeFailed || replaceFailed ? 1 : 0;
}

runBench('bench:provision', main);
