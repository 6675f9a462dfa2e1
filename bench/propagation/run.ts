/**
 * `npm run bench:propagation`: how fast an API write reaches traffic, and what a large
 * configuration costs the data plane.
 *
 * 1. API write -> traffic: a tcp NodeBalancer with one node; each change moves the node to the
 *    other of two backends (PUT .../nodes/{id} address) and the clock runs from just before the
 *    request until a new connection reaches the new backend. p50/p99 over --changes (100).
 * 2. Scale: a data plane process is connected while NodeBalancers (2 configs x 10 nodes each) are
 *    created through the API: first 100, where the write -> traffic measure runs
 *    (--scale-changes, 20) with the control plane's time per write (its push rounds); then up to
 *    --nodebalancers (1,000), where the same measure runs again, with the data plane's resident
 *    memory. Then a fresh data plane process connects (as after a restart) and we time start ->
 *    ACK of the full state; last, the engine's apply of the same snapshot is timed inside one
 *    process (apply-snapshot.ts).
 */
import { spawn } from 'node:child_process';
import { createServer, type AddressInfo, type Server } from 'node:net';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseFlags } from '../../lib/args.js';
import { runBench, stopAll, treeMemoryMb, waitFor } from '../common/processes.js';
import { onStop } from '../common/stops.js';
import { startBenchControlPlane, startDataplaneProcess, waitForApplied, type Api } from '../common/fulcrum.js';
import { fmt, percentile, table } from '../common/stats.js';
import type { ControlPlane } from '../../control-plane/main.js';
import { nameServer, whoAnswers, type NameServer } from './probe.js';
import { seedNodeBalancers } from './seed.js';

const DP_ID = 'bench-propagation';
const POOL = '127.178.0.0/16';
/** The ports the bench's NodeBalancers use: the probe's, and the scale ones' http and tcp. */
interface Ports {
  probe: number;
  http: number;
  tcp: number;
}
let PORTS: Ports = { probe: 9000, http: 80, tcp: 8080 };

/** Ports free on the wildcard address (wildcard listeners must own their ports on every address). */
async function freeWildcardPorts(): Promise<Ports> {
  const servers = await Promise.all([0, 1, 2].map(() => new Promise<Server>((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '0.0.0.0', () => resolve(srv));
  })));
  const [probe, http, tcp] = servers.map((srv) => (srv.address() as AddressInfo).port);
  await Promise.all(servers.map((srv) => new Promise((r) => srv.close(r))));
  return { probe: probe!, http: http!, tcp: tcp! };
}

interface Latencies {
  writeToTrafficMs: number[];
  apiMs: number[];
  /** The control plane's push rounds during the changes, mean ms per round. */
  roundMs: number;
}

/** Sum (s) and count of the control plane's push-round histogram. */
async function rounds(cp: ControlPlane): Promise<{ sum: number; count: number }> {
  const m = cp.context.registry.getSingleMetric('fulcrum_config_push_round_seconds');
  const values = m ? (await m.get()).values : [];
  const pick = (suffix: string) => values.find((v) => (v as { metricName?: string }).metricName === `fulcrum_config_push_round_seconds_${suffix}`)?.value ?? 0;
  return { sum: pick('sum'), count: pick('count') };
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2), { changes: 'number', nodebalancers: 'number', 'scale-changes': 'number', keep: 'boolean', seed: 'string', listeners: 'string' });
  const changes = (f.changes as number | undefined) ?? 100;
  const nbCount = (f.nodebalancers as number | undefined) ?? 1000;
  // api: every NodeBalancer through the REST API; store: the first 100 so, the rest written into
  // the database (seed.ts). Above 1,000 the API at a few creates per second would take hours.
  const seed = (f.seed as string | undefined) ?? (nbCount > 1000 ? 'store' : 'api');
  if (seed !== 'api' && seed !== 'store') throw new Error('--seed must be api or store');
  // address: one socket per NodeBalancer address and port; wildcard: one per port
  // (docs/dataplane.md, "Wildcard listeners"), the default above 4,000 NodeBalancers, whose
  // 8,000+ sockets would not fit a 20,000 open-file limit with two worker processes' share.
  const listenerMode = (f.listeners as string | undefined) ?? (nbCount > 4000 ? 'wildcard' : 'address');
  if (listenerMode !== 'address' && listenerMode !== 'wildcard') throw new Error('--listeners must be address or wildcard');
  const dpFlags = listenerMode === 'wildcard' ? ['--wildcard-listeners'] : [];
  if (listenerMode === 'wildcard') PORTS = await freeWildcardPorts();
  const scaleChanges = (f['scale-changes'] as number | undefined) ?? 20;
  if (nbCount < 1 || nbCount > 60_000) throw new Error('--nodebalancers must be between 1 and 60000 (the bench pool is 127.178.0.0/16)');
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-bench-prop-'));
  const cleanups: (() => Promise<void>)[] = [];
  // The finally below and a signal (stops.ts) run this same stop, once.
  const stopBench = onStop(`the name servers, control plane, data plane and ${dir}`, async () => {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await stopAll();
    if (f.keep) process.stdout.write(`logs kept in ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
  });
  process.stdout.write(`fulcrum propagation bench\nmachine: ${cpus().length} x ${cpus()[0]?.model ?? 'unknown'}; load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}; node ${process.version}\n`);
  process.stdout.write(`listeners: ${listenerMode} (ports probe ${PORTS.probe}, http ${PORTS.http}, tcp ${PORTS.tcp}); seeding: ${seed}\n\n`);

  const a = await nameServer('127.0.61.1', 'A');
  const b = await nameServer('127.0.61.2', 'B');
  cleanups.push(() => a.close(), () => b.close());
  const out: string[][] = [['measure', 'size', 'p50', 'p99', 'max', 'target']];
  let smallP99 = NaN;
  try {
    // 1. Small configuration.
    {
      const { cp, api } = await startBenchControlPlane(join(dir, 'cp-small'), '127.178.0.0/16');
      const dp = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: join(dir, 'dp-small'), logDir: dir, flags: dpFlags });
      const lat = await writeToTraffic(api, cp, a, b, changes, 'small');
      await dp.stop();
      await cp.close();
      smallP99 = percentile(lat.writeToTrafficMs, 99);
      out.push(['API write -> traffic (ms)', `1 NodeBalancer, ${changes} changes`, fmt(percentile(lat.writeToTrafficMs, 50), 1), fmt(percentile(lat.writeToTrafficMs, 99), 1), fmt(Math.max(...lat.writeToTrafficMs), 1), 'p99 < 200']);
      out.push(['  of which the API call (ms)', '', fmt(percentile(lat.apiMs, 50), 1), fmt(percentile(lat.apiMs, 99), 1), fmt(Math.max(...lat.apiMs), 1), '']);
    }

    // 2. Large configuration, created while a data plane is connected (each write reaches it as
    // an incremental snapshot), measured at 100 NodeBalancers and at --nodebalancers.
    const cpDir = join(dir, 'cp-large');
    let { cp, api } = await startBenchControlPlane(cpDir, POOL);
    cleanups.push(() => cp.close());
    const size = `${nbCount} NodeBalancers x 2 configs x 10 nodes`;
    const baseCount = Math.min(100, nbCount);
    const dpState = join(dir, 'dp-large');
    let dp = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: dpState, logDir: dir, flags: dpFlags });
    await createMany(api, 0, baseCount);
    process.stdout.write(`measuring API write -> traffic with ${baseCount} NodeBalancers loaded (${scaleChanges} changes)...\n`);
    const latBase = await writeToTraffic(api, cp, a, b, scaleChanges, 'base');
    const tc = performance.now();
    if (seed === 'store') {
      process.stdout.write(`writing ${size} into the stopped control plane's database, then starting both again...\n`);
      const template = (await api('GET', '/nodebalancers')).data[0].id as number;
      await dp.stop();
      await cp.close();
      await seedNodeBalancers(cpDir, POOL, template, baseCount, nbCount);
      ({ cp, api } = await startBenchControlPlane(cpDir, POOL));
      dp = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: dpState, logDir: dir, flags: dpFlags });
    } else {
      process.stdout.write(`creating ${size} through the API, the data plane connected...\n`);
      await createMany(api, baseCount, nbCount);
    }
    await waitForApplied(cp, api, DP_ID, 600_000);
    const createS = (performance.now() - tc) / 1000;
    process.stdout.write(`  created and applied in ${fmt(createS, 1)} s (${fmt((nbCount - baseCount) / createS)} NodeBalancers/s)\n`);
    const memLoaded = treeMemoryMb(dp.pid);
    process.stdout.write(`measuring API write -> traffic with ${size} loaded (${scaleChanges} changes)...\n`);
    const lat = await writeToTraffic(api, cp, a, b, scaleChanges, 'large');
    const memAfter = treeMemoryMb(dp.pid);
    await dp.stop();
    // The stopped data plane's status must read disconnected first, or the wait below ends at once.
    await waitFor('the stopped data plane to read disconnected', async () => ((await api('GET', '/fulcrum/dataplanes')).data.some((d: any) => d.id === DP_ID && d.connected) ? undefined : true), 60_000);

    // A data plane that (re)connects gets the whole state.
    const t0 = performance.now();
    const dp2 = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: join(dir, 'dp-fresh'), logDir: dir, flags: dpFlags });
    let peakWhileApplying = 0;
    const sampler = setInterval(() => (peakWhileApplying = Math.max(peakWhileApplying, treeMemoryMb(dp2.pid).rss)), 20);
    await waitForApplied(cp, api, DP_ID, 600_000);
    const startToAckMs = performance.now() - t0;
    clearInterval(sampler);
    const mem = treeMemoryMb(dp2.pid);
    await dp2.stop();
    process.stdout.write(`  fresh data plane process start -> full state ACKed: ${fmt(startToAckMs)} ms; RSS ${fmt(mem.rss)} MB (peak ${fmt(mem.peak)} MB)\n`);

    process.stdout.write('applying the same snapshot in a fresh engine (one process, timed inside it)...\n');
    const snapFile = join(dir, 'dp-fresh', `dataplane-${DP_ID}.json`);
    const inProc = await applyInChild(snapFile, listenerMode === 'wildcard');

    const p99 = percentile(lat.writeToTrafficMs, 99);
    const cpRatio = lat.roundMs / latBase.roundMs;
    // The target is for a data plane serving the state; the sum of each process's own peak
    // (during a whole apply, at different moments) is printed beside it.
    const rssPeak = Math.max(memLoaded.rss, memAfter.rss, mem.rss, peakWhileApplying);
    out.push(['API write -> traffic (ms)', `${baseCount} NodeBalancers, ${scaleChanges} changes`, fmt(percentile(latBase.writeToTrafficMs, 50), 1), fmt(percentile(latBase.writeToTrafficMs, 99), 1), fmt(Math.max(...latBase.writeToTrafficMs), 1), '']);
    out.push(['  of which the API call (ms)', '', fmt(percentile(latBase.apiMs, 50), 1), fmt(percentile(latBase.apiMs, 99), 1), fmt(Math.max(...latBase.apiMs), 1), '']);
    out.push(['API write -> traffic (ms)', `${size}, ${scaleChanges} changes`, fmt(percentile(lat.writeToTrafficMs, 50), 1), fmt(p99, 1), fmt(Math.max(...lat.writeToTrafficMs), 1), 'p99 < 100']);
    out.push(['  of which the API call (ms)', '', fmt(percentile(lat.apiMs, 50), 1), fmt(percentile(lat.apiMs, 99), 1), fmt(Math.max(...lat.apiMs), 1), '']);
    process.stdout.write(`\n${table(out)}\n\n`);
    const cpRows = [
      [`${baseCount} loaded`, fmt(latBase.roundMs, 2), fmt(percentile(latBase.apiMs, 50), 1), ''],
      [`${nbCount} loaded`, fmt(lat.roundMs, 2), fmt(percentile(lat.apiMs, 50), 1), `${fmt(cpRatio, 2)}x (target <= 2x)`],
    ];
    process.stdout.write(table([['control plane per write', 'push round ms (mean)', 'API call p50 ms', 'ratio'], ...cpRows]) + '\n\n');

    const snapMb = inProc.snapshotBytes / (1024 * 1024);
    const rows = [
      ['snapshot: ' + size, `${nbCount * 2} listeners, ${nbCount * 20} nodes, ${fmt(snapMb, 1)} MB as JSON`],
      [`data plane RSS summed over its ${memLoaded.processes} processes (primary + workers), all loaded / after the changes`, `${fmt(memLoaded.rss)} MB / ${fmt(memAfter.rss)} MB (target < 1,024 MB)`],
      ['fresh data plane process start -> full state ACKed (spawn, connect, transfer, validate, bind, persist)', `${fmt(startToAckMs)} ms`],
      ['fresh data plane RSS summed over its processes after the full state / peak (sampled sum; sum of each one\'s peak)', `${fmt(mem.rss)} MB / ${fmt(peakWhileApplying)} MB; ${fmt(mem.peak)} MB`],
      ['engine.apply of that snapshot, timed in the process', `${fmt(inProc.applyMs)} ms (target < 1,000 ms)`],
      ['engine RSS after apply (fresh process) / heap used', `${fmt(inProc.rssAfterMb)} MB / ${fmt(inProc.heapUsedMb)} MB (target RSS < 300 MB)`],
      ['re-apply with one node weight changed', `${fmt(inProc.reapplyMs)} ms`],
    ];
    process.stdout.write(table([['large snapshot', 'result'], ...rows]) + '\n\n');

    const shortfalls: string[] = [];
    if (!(smallP99 < 200)) shortfalls.push(`API write -> traffic p99 ${fmt(smallP99, 1)} ms, target < 200 ms`);
    if (!(inProc.applyMs < 1000)) shortfalls.push(`snapshot apply ${fmt(inProc.applyMs)} ms, target < 1,000 ms`);
    if (!(p99 < 100)) shortfalls.push(`API write -> traffic p99 with ${size} loaded ${fmt(p99, 1)} ms, target < 100 ms`);
    if (!(cpRatio <= 2)) shortfalls.push(`control-plane time per write ${fmt(cpRatio, 2)}x that with ${baseCount} loaded, target <= 2x`);
    if (!(rssPeak < 1024)) shortfalls.push(`data plane RSS ${fmt(rssPeak)} MB, target < 1,024 MB`);
    if (shortfalls.length === 0) process.stdout.write('all propagation targets met in this run\n');
    else process.stdout.write(`SHORTFALL (targets not met in this run):\n${shortfalls.map((s) => `  - ${s}`).join('\n')}\n`);
  } finally {
    await stopBench();
  }
}

async function writeToTraffic(api: Api, cp: ControlPlane, a: NameServer, b: NameServer, changes: number, label: string): Promise<Latencies> {
  const nb = await api('POST', '/nodebalancers', {
    region: 'us-east', label: `bench-prop-${label}`,
    configs: [{ port: PORTS.probe, protocol: 'tcp', algorithm: 'roundrobin', stickiness: 'none', check: 'none', nodes: [{ label: 'moving-node', address: `${a.ip}:${a.port}` }] }],
  });
  const config = (await api('GET', `/nodebalancers/${nb.id}/configs`)).data[0];
  const node = (await api('GET', `/nodebalancers/${nb.id}/configs/${config.id}/nodes`)).data[0];
  await waitForApplied(cp, api, DP_ID, 120_000);
  await waitFor('the first answer through the NodeBalancer', async () => ((await whoAnswers(nb.ipv4, PORTS.probe)) === 'A' ? true : undefined), 30_000);
  const lat: Latencies = { writeToTrafficMs: [], apiMs: [], roundMs: NaN };
  const before = await rounds(cp);
  for (let i = 0; i < changes; i++) {
    const to = i % 2 === 0 ? b : a;
    const want = to === a ? 'A' : 'B';
    const t0 = performance.now();
    await api('PUT', `/nodebalancers/${nb.id}/configs/${config.id}/nodes/${node.id}`, { address: `${to.ip}:${to.port}` });
    lat.apiMs.push(performance.now() - t0);
    // Probe with new connections until the new backend answers (each probe is a fresh connection).
    const deadline = t0 + 30_000;
    for (;;) {
      if ((await whoAnswers(nb.ipv4, PORTS.probe)) === want) break;
      if (performance.now() > deadline) throw new Error(`traffic did not follow change ${i + 1} within 30 s`);
    }
    lat.writeToTrafficMs.push(performance.now() - t0);
  }
  const after = await rounds(cp);
  lat.roundMs = ((after.sum - before.sum) * 1000) / Math.max(1, after.count - before.count);
  await api('DELETE', `/nodebalancers/${nb.id}`);
  return lat;
}

async function createMany(api: Api, from: number, count: number): Promise<void> {
  const nodes = Array.from({ length: 10 }, (_, i) => ({ label: `node-${i + 1}`, address: `127.0.62.${i + 1}:80`, weight: 100, mode: 'accept' }));
  const body = (i: number) => ({
    region: 'us-east', label: `scale-${String(i).padStart(5, '0')}`,
    configs: [
      { port: PORTS.http, protocol: 'http', algorithm: 'roundrobin', stickiness: 'none', check: 'none', nodes },
      { port: PORTS.tcp, protocol: 'tcp', algorithm: 'leastconn', stickiness: 'none', check: 'none', nodes },
    ],
  });
  let next = from;
  const worker = async () => {
    while (next < count) await api('POST', '/nodebalancers', body(next++));
  };
  await Promise.all(Array.from({ length: 4 }, worker));
}

function applyInChild(snapshotFile: string, wildcard: boolean): Promise<{ applyMs: number; reapplyMs: number; rssAfterMb: number; heapUsedMb: number; snapshotBytes: number }> {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'apply-snapshot.js');
  readFileSync(snapshotFile); // fails clearly if the data plane did not persist it
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script, snapshotFile, ...(wildcard ? ['--wildcard'] : [])], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FULCRUM_LOG_LEVEL: 'warn' } });
    let outText = '';
    let errText = '';
    p.stdout.on('data', (d: Buffer) => (outText += d.toString()));
    p.stderr.on('data', (d: Buffer) => (errText += d.toString()));
    p.once('exit', (code) => {
      const line = outText.trim().split('\n').pop() ?? '';
      if (code === 0 && line.startsWith('{')) resolve(JSON.parse(line));
      else reject(new Error(`apply-snapshot exited ${code}: ${errText.trim() || outText.trim()}`));
    });
  });
}

runBench('bench:propagation', main);
