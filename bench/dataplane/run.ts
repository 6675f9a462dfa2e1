/**
 * `npm run bench:dataplane`: our data plane against HAProxy (one thread) on the same nginx
 * backends, in alternating rounds, with the ratios issue 6 asks for. Exits 0 even when a
 * target is missed: the shortfall is printed instead.
 *
 * Flags: --duration S (per round, default 6) --rounds N (default 3) --connections N (default 50)
 *        --workers N (our data plane's workers, the bare relay's and HAProxy's nbthread, default 1; with 2
 *        or more the bench ends with a reload of ours under wrk load, reload.ts) --distribution rr|kernel (ours)
 *        --relay-floor=false (leave out the bare Node relay, relay.ts, measured by default in the
 *        http-keepalive, http-close, tcp-small and https-keepalive scenarios: ours / relay CPU per request)
 *        --only a,b (scenario names; `udp` is the UDP scenario against nginx's stream proxy, udp.ts) --profile (CPU-profile our data plane and print the hot spots)
 *        --json FILE (write all rounds) --keep (keep the temp folder with logs and configs)
 *        --hold (set everything up, print the addresses and pids, and wait for Ctrl-C: for strace/perf)
 *        --perf-map (start the data plane with --perf-basic-prof, so `perf report` names JS functions)
 */
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync, readdirSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseFlags } from '../../lib/args.js';
import { cpuTimes as processCpuTimes, ensureTools, run, stopAll, runBench, treeCpuTimes } from '../common/processes.js';
import { onStop } from '../common/stops.js';
import { startBenchControlPlane, startDataplaneProcess, waitForApplied } from '../common/fulcrum.js';
import { fmt, median, table } from '../common/stats.js';
import { BACKENDS, BACKEND_PORT, HAPROXY_IP, PORTS, RELAY_IP, makeCert, startHaproxy, startNginx, waitForPort } from './servers.js';
import { startRelay } from './relay.js';
import { RECOMMENDED_CIPHERS } from '../../dataplane/config/cipher-suites.js';
import { scenarios, type Scenario } from './scenarios.js';
import { errorCount, runWrk, wrkScript, type WrkResult } from './wrk.js';
import { summarizeProfile } from './profile.js';
import { runUdpScenario } from './udp.js';
import { reloadUnderLoad } from './reload.js';

type Target = 'ours' | 'relay' | 'haproxy';

interface Sample {
  scenario: string;
  target: Target;
  round: number;
  result?: WrkResult;
  /** Proxy CPU time per request (µs), or per MB for bulk; and the user-space part of it. */
  cpuPerUnit?: number;
  userPerUnit?: number;
  cpuShare?: number;
  error?: string;
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2), {
    duration: 'number', rounds: 'number', connections: 'number', workers: 'number', distribution: 'string', only: 'string', profile: 'boolean', json: 'string', keep: 'boolean', hold: 'boolean', 'perf-map': 'boolean', 'relay-floor': 'boolean',
  });
  const durationS = (f.duration as number | undefined) ?? 6;
  const rounds = (f.rounds as number | undefined) ?? 3;
  const connections = (f.connections as number | undefined) ?? 50;
  const workers = (f.workers as number | undefined) ?? 1;
  const only = (f.only as string | undefined)?.split(',').filter(Boolean);
  const withRelay = f['relay-floor'] !== false;
  let list = scenarios(connections, workers);
  // `udp` is measured apart (udp.ts): against nginx's stream proxy, not HAProxy, without wrk.
  const withUdp = !only || only.includes('udp');
  if (only) {
    const unknown = only.filter((n) => n !== 'udp' && !list.some((s) => s.name === n));
    if (unknown.length) throw new Error(`unknown scenario(s) ${unknown.join(', ')}; known: ${list.map((s) => s.name).join(', ')}`);
    list = list.filter((s) => only.includes(s.name));
  }

  const tools = ensureTools({ haproxy: 'haproxy', nginx: 'nginx', wrk: 'wrk', openssl: 'openssl' });
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-bench-dp-'));
  // Stopped newest first, by the finally below or by a signal (stops.ts): the control plane, the
  // processes (nginx, HAProxy, the relay, the data plane), then the folder unless it is kept.
  onStop(`the folder ${dir}`, async () => {
    if (!f.keep && !f.profile) rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  });
  const stopProcesses = onStop('the benchmark\'s processes', stopAll);
  let stopCp: () => Promise<void> = async () => {};
  const versions = await toolVersions(tools);
  printMachine(versions, durationS, rounds, connections, workers);

  const samples: Sample[] = [];
  let udpShortfalls: string[] = [];
  const profileDir = join(dir, 'profile');
  try {
    const cert = await makeCert(dir);
    await startNginx(dir, tools.nginx!);
    const haproxy = await startHaproxy(dir, tools.haproxy!, cert, workers);
    // The bare Node relay, with as many workers as ours, in front of the same backends.
    const relay = withRelay && list.some((s) => s.floor)
      ? startRelay(dir, {
        ip: RELAY_IP, ports: PORTS, backends: BACKENDS.map((host) => ({ host, port: BACKEND_PORT })),
        certFile: cert.certFile, keyFile: cert.keyFile, ciphers: RECOMMENDED_CIPHERS.join(':'), workers,
      })
      : null;
    if (relay !== null) for (const port of Object.values(PORTS)) await waitForPort(RELAY_IP, port, () => relay.proc.exitCode !== null ? 'the bare relay exited (relay.log)' : undefined);

    const { cp, api } = await startBenchControlPlane(join(dir, 'control-plane'), '127.177.0.0/16');
    stopCp = onStop('the control plane', () => cp.close());
    const dp = await startDataplaneProcess({
      id: 'bench-dataplane', cp, grpcAddress: cp.grpcAddress, stateDir: join(dir, 'dataplane'), logDir: dir, flags: ['--workers', String(workers), ...(f.distribution ? ['--distribution', f.distribution as string] : [])],
      nodeFlags: [...(f.profile ? ['--cpu-prof', `--cpu-prof-dir=${profileDir}`] : []), ...(f['perf-map'] ? ['--perf-basic-prof'] : [])],
    });
    const nodes = BACKENDS.map((ip, i) => ({ label: `nginx-${i + 1}`, address: `${ip}:${BACKEND_PORT}`, weight: 100, mode: 'accept' }));
    const common = { algorithm: 'roundrobin', stickiness: 'none', check: 'none', nodes };
    const nb = await api('POST', '/nodebalancers', {
      region: 'us-east', label: 'bench-dataplane', client_conn_throttle: 0,
      configs: [
        { port: PORTS.http, protocol: 'http', ...common },
        { port: PORTS.tcp, protocol: 'tcp', ...common },
        { port: PORTS.https, protocol: 'https', ssl_cert: cert.cert, ssl_key: cert.key, cipher_suite: 'recommended', ...common },
      ],
    });
    await waitForApplied(cp, api, 'bench-dataplane', 60_000);
    for (const port of Object.values(PORTS)) await waitForPort(nb.ipv4, port);
    process.stdout.write(`ours: NodeBalancer ${nb.ipv4} (data plane pid ${dp.pid}); haproxy: ${HAPROXY_IP} (pid ${haproxy.pid})` +
      `${relay !== null ? `; bare relay: ${RELAY_IP} (pid ${relay.pid})` : ''}\n\n`);

    const script = wrkScript(dir);
    if (f.hold) {
      process.stdout.write(`holding: ports ${JSON.stringify(PORTS)}; wrk Lua script ${script}; Ctrl-C to stop\n`);
      await new Promise(() => undefined); // the signal handler stops everything
    }
    const addr: Record<Target, string> = { ours: nb.ipv4, relay: RELAY_IP, haproxy: HAPROXY_IP };
    const pid: Record<Target, number> = { ours: dp.pid, relay: relay?.pid ?? 0, haproxy: haproxy.pid };
    for (const s of list) {
      process.stdout.write(`${s.name}: ${s.what}\n`);
      const targets: Target[] = relay !== null && s.floor ? ['ours', 'relay', 'haproxy'] : ['ours', 'haproxy'];
      for (const t of targets) {
        await runWrk(tools.wrk!, script, s.wrk(addr[t], 1)).catch(() => undefined); // warm-up (JIT, pools)
      }
      for (let round = 0; round < rounds; round++) {
        // ABBA (ABCCBA) order, so a slow drift of the machine's load does not favour one side.
        const order: Target[] = round % 2 === 0 ? targets : [...targets].reverse();
        for (const t of order) {
          const sample = await measure(s, t, round, tools.wrk!, script, addr[t], pid[t], durationS);
          samples.push(sample);
          process.stdout.write(`  round ${round + 1} ${t.padEnd(7)} ${describe(s, sample)}\n`);
        }
      }
    }
    if (workers > 1) await reloadUnderLoad({ wrk: tools.wrk!, script, ip: nb.ipv4, pid: dp.pid, durationS: Math.max(durationS, 6), connections, threads: workers });
    if (withUdp) {
      const waitApplied = () => waitForApplied(cp, api, 'bench-dataplane', 60_000);
      udpShortfalls = await runUdpScenario({ dir, api, nginxBin: tools.nginx!, ourPid: dp.pid, waitApplied, durationS, rounds, flows: connections, workers });
    }
    await dp.stop();
  } finally {
    await stopCp();
    await stopProcesses();
  }

  if (list.length > 0) report(list, samples, workers);
  if (samples.some((x) => x.target === 'relay')) reportFloor(list, samples, workers);
  if (udpShortfalls.length > 0) process.stdout.write(`SHORTFALL (udp):\n${udpShortfalls.map((x) => `  - ${x}`).join('\n')}\n`);
  if (f.json) writeFileSync(f.json as string, JSON.stringify({ machine: versions, durationS, rounds, connections, samples }, null, 2));
  if (f.profile) {
    const files = readdirSync(profileDir).filter((n) => n.endsWith('.cpuprofile'));
    if (files.length === 0) process.stdout.write('\nno CPU profile was written by the data plane\n');
    for (const file of files) {
      process.stdout.write(`\nCPU profile of our data plane (${join(profileDir, file)}), all scenarios:\n`);
      process.stdout.write(summarizeProfile(join(profileDir, file), 30) + '\n');
    }
  }
  // The folder goes with runBench's end (the stop registered above).
  if (f.keep || f.profile) process.stdout.write(`\nlogs, configs and profiles kept in ${dir}\n`);
}

async function measure(s: Scenario, t: Target, round: number, wrk: string, script: string, ip: string, pid: number, durationS: number): Promise<Sample> {
  // Ours and the relay: the primary and its workers (HAProxy's threads are in its own figure).
  const cpuTimes = t === 'haproxy' ? processCpuTimes : treeCpuTimes;
  const cpu0 = cpuTimes(pid);
  try {
    const result = await runWrk(wrk, script, s.wrk(ip, durationS));
    const cpu1 = cpuTimes(pid);
    const user = cpu1.user - cpu0.user;
    const cpu = user + cpu1.sys - cpu0.sys;
    const units = s.unit === 'MB/s' ? result.bytes / (1024 * 1024) : result.requests;
    const sample: Sample = {
      scenario: s.name, target: t, round, result, cpuShare: cpu / result.durationS,
      cpuPerUnit: units > 0 ? (cpu * 1e6) / units : NaN, userPerUnit: units > 0 ? (user * 1e6) / units : NaN,
    };
    const errs = errorCount(result);
    if (result.requests === 0) sample.error = 'no request completed';
    else if (errs > result.requests * 0.01) sample.error = `${errs} errors (${JSON.stringify(result.errors)})`;
    return sample;
  } catch (err) {
    return { scenario: s.name, target: t, round, error: (err as Error).message.split('\n')[0] };
  }
}

function value(s: Scenario, r: WrkResult): number {
  return s.unit === 'MB/s' ? r.mbPerS : r.reqPerS;
}

function describe(s: Scenario, x: Sample): string {
  if (!x.result) return `FAILED: ${x.error}`;
  const r = x.result;
  return `${fmt(value(s, r), 0)} ${s.unit}  p50 ${fmt(r.p50Ms, 2)} ms  p99 ${fmt(r.p99Ms, 2)} ms  proxy cpu ${fmt((x.cpuShare ?? NaN) * 100)}%` +
    (x.error ? `  (${x.error})` : '');
}

function report(list: Scenario[], samples: Sample[], workers: number): void {
  const rows: string[][] = [['scenario', 'unit', 'ours', 'haproxy', 'ratio', 'target', 'ours p50/p99 ms', 'haproxy p50/p99 ms', 'p99 ratio', 'cpu µs/unit ours (user)', 'haproxy (user)', 'cpu ratio']];
  const shortfalls: string[] = [];
  const perCore: string[] = [];
  for (const s of list) {
    const pick = (t: Target) => samples.filter((x) => x.scenario === s.name && x.target === t && x.result && !x.error);
    const ours = pick('ours');
    const hap = pick('haproxy');
    const agg = (xs: Sample[]) => ({
      v: median(xs.map((x) => value(s, x.result!))),
      p50: median(xs.map((x) => x.result!.p50Ms)),
      p99: median(xs.map((x) => x.result!.p99Ms)),
      cpu: median(xs.map((x) => x.cpuPerUnit ?? NaN)),
      user: median(xs.map((x) => x.userPerUnit ?? NaN)),
    });
    const o = agg(ours);
    const h = agg(hap);
    const ratio = o.v / h.v;
    const p99Ratio = o.p99 / h.p99;
    const target = [s.minRatio ? `>= ${s.minRatio}` : '', s.maxP99Ratio ? `p99 <= ${s.maxP99Ratio}x` : ''].filter(Boolean).join(', ') || '(none)';
    rows.push([s.name, s.unit, fmt(o.v), fmt(h.v), fmt(ratio, 2), target, `${fmt(o.p50, 2)}/${fmt(o.p99, 2)}`, `${fmt(h.p50, 2)}/${fmt(h.p99, 2)}`, fmt(p99Ratio, 2), `${fmt(o.cpu, 1)} (${fmt(o.user, 1)})`, `${fmt(h.cpu, 1)} (${fmt(h.user, 1)})`, fmt(o.cpu / h.cpu, 2)]);
    const failed = samples.filter((x) => x.scenario === s.name && x.target === 'ours' && x.error);
    if (ours.length === 0) {
      shortfalls.push(`${s.name}: our data plane completed no clean round (${failed[0]?.error ?? 'no data'})`);
      continue;
    }
    if (s.minRatio && !(ratio >= s.minRatio)) shortfalls.push(`${s.name}: ${fmt(ratio, 2)} of HAProxy's ${s.unit}, target ${s.minRatio} (needs ${fmt((s.minRatio / ratio - 1) * 100)}% more)`);
    if (s.maxP99Ratio && !(p99Ratio <= s.maxP99Ratio)) shortfalls.push(`${s.name}: p99 latency ${fmt(p99Ratio, 2)}x HAProxy's, target at most ${s.maxP99Ratio}x`);
    const pc = s.perCore;
    if (workers > 1 && pc) {
      const cpuRatio = o.cpu / h.cpu;
      const ok = (!pc.minRatio || ratio >= pc.minRatio) && cpuRatio <= pc.maxCpuRatio;
      perCore.push(`${s.name}: req/s ${fmt(ratio, 2)}${pc.minRatio ? ` (target >= ${pc.minRatio})` : ''}, cpu per request ${fmt(cpuRatio, 2)}x HAProxy's (target <= ${pc.maxCpuRatio}x): ${ok ? 'met' : 'NOT met'}`);
    }
  }
  process.stdout.write(`\nmedians of the clean rounds; cpu µs/unit: the proxy process's CPU time per request (per MB for MB/s), user-space part in brackets\n${table(rows)}\n\n`);
  if (shortfalls.length === 0) process.stdout.write('all targets of issue 6 met in this run\n');
  else process.stdout.write(`SHORTFALL (targets of issue 6 not met in this run):\n${shortfalls.map((x) => `  - ${x}`).join('\n')}\n`);
  if (perCore.length > 0) process.stdout.write(`per-core targets (issue 15; ${workers} workers / nbthread ${workers}):\n${perCore.map((x) => `  - ${x}`).join('\n')}\n`);
}

/**
 * CPU per request against the bare Node relay doing the same work in the same run: the share of
 * the cost that is our own code (docs/performance.md "CPU per request against a bare Node relay").
 */
function reportFloor(list: Scenario[], samples: Sample[], workers: number): void {
  const rows: string[][] = [['scenario', 'req/s ours', 'relay', 'haproxy', 'cpu µs/req ours (user)', 'relay (user)', 'haproxy (user)', 'ours/relay', 'target', 'ours/haproxy', 'relay/haproxy']];
  const verdicts: string[] = [];
  for (const s of list) {
    if (!s.floor) continue;
    const pick = (t: Target) => samples.filter((x) => x.scenario === s.name && x.target === t && x.result && !x.error);
    const agg = (t: Target) => {
      const xs = pick(t);
      return { n: xs.length, v: median(xs.map((x) => x.result!.reqPerS)), cpu: median(xs.map((x) => x.cpuPerUnit ?? NaN)), user: median(xs.map((x) => x.userPerUnit ?? NaN)) };
    };
    const o = agg('ours');
    const r = agg('relay');
    const h = agg('haproxy');
    const ratio = o.cpu / r.cpu;
    rows.push([s.name, fmt(o.v), fmt(r.v), fmt(h.v), `${fmt(o.cpu, 1)} (${fmt(o.user, 1)})`, `${fmt(r.cpu, 1)} (${fmt(r.user, 1)})`, `${fmt(h.cpu, 1)} (${fmt(h.user, 1)})`,
      fmt(ratio, 2), `<= ${s.floor.maxCpuRatio}`, fmt(o.cpu / h.cpu, 2), fmt(r.cpu / h.cpu, 2)]);
    if (o.n === 0 || r.n === 0) verdicts.push(`${s.name}: no clean round for ${o.n === 0 ? 'ours' : 'the relay'}`);
    else verdicts.push(`${s.name}: ${fmt(ratio, 2)}x the bare relay's CPU per request (target <= ${s.floor.maxCpuRatio}x): ${ratio <= s.floor.maxCpuRatio ? 'met' : 'NOT met'}`);
  }
  process.stdout.write(`\nCPU per request against the bare Node relay (relay.ts; ${workers} worker(s) each, HAProxy nbthread ${workers}), medians of the clean rounds:\n${table(rows)}\n`);
  process.stdout.write(`floor targets:\n${verdicts.map((x) => `  - ${x}`).join('\n')}\n`);
}

async function toolVersions(tools: Record<string, string>): Promise<Record<string, string>> {
  const first = async (cmd: string, args: string[]) => (await run(cmd, args).catch((e: Error) => e.message)).split('\n')[0]!.trim();
  return {
    cpu: `${cpus().length} x ${cpus()[0]?.model ?? 'unknown'}`,
    node: process.version,
    haproxy: await first(tools.haproxy!, ['-v']),
    // nginx -v and wrk -v print to stderr (and wrk exits 1).
    nginx: both(tools.nginx!, ['-v']),
    wrk: both(tools.wrk!, ['-v']),
    load: loadavg().map((x) => x.toFixed(2)).join(' '),
  };
}

function both(cmd: string, args: string[]): string {
  const r = spawnSync(cmd, args, { encoding: 'utf8' });
  return `${r.stdout ?? ''}${r.stderr ?? ''}`.split('\n')[0]!.trim();
}

function printMachine(v: Record<string, string>, durationS: number, rounds: number, connections: number, workers: number): void {
  process.stdout.write(`fulcrum data-plane bench: ${rounds} rounds x ${durationS} s per scenario and proxy, ${connections} connections, ${workers} worker(s) / nbthread ${workers}\n`);
  process.stdout.write(`machine: ${v.cpu}; load average ${v.load}; node ${v.node}\n${v.haproxy}\n${v.nginx}\n${v.wrk}\n`);
  process.stdout.write('wrk, nginx and the proxy under test share these cores; compare ratios, not absolute numbers.\n\n');
}

runBench('bench:dataplane', main);
