/**
 * `npm run bench:propagation`: how fast an API write reaches traffic, and what a large
 * configuration costs the data plane.
 *
 * 1. API write -> traffic: a tcp NodeBalancer with one node; each change moves the node to the
 *    other of two backends (PUT .../nodes/{id} address) and the clock runs from just before the
 *    request until a new connection reaches the new backend. p50/p99 over --changes (100).
 * 2. Scale: --nodebalancers (1,000) NodeBalancers x 2 configs x 10 nodes created through the
 *    API; a fresh data plane process connects and we time start -> ACK of that snapshot, with
 *    its resident memory; then the same write -> traffic measure with that configuration
 *    loaded (--scale-changes, 20); then the engine's apply of the same snapshot timed inside
 *    one process (apply-snapshot.ts).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { cpus, loadavg, tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { performance } from 'node:perf_hooks';
import { parseFlags } from '../../lib/args.js';
import { memoryMb, stopAll, stopChildrenOnSignal, waitFor } from '../common/processes.js';
import { startBenchControlPlane, startDataplaneProcess, waitForApplied, type Api } from '../common/fulcrum.js';
import { fmt, percentile, table } from '../common/stats.js';
import { nameServer, whoAnswers, type NameServer } from './probe.js';

const DP_ID = 'bench-propagation';
const PORT = 9000;

interface Latencies {
  writeToTrafficMs: number[];
  apiMs: number[];
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2), { changes: 'number', nodebalancers: 'number', 'scale-changes': 'number', keep: 'boolean' });
  const changes = (f.changes as number | undefined) ?? 100;
  const nbCount = (f.nodebalancers as number | undefined) ?? 1000;
  const scaleChanges = (f['scale-changes'] as number | undefined) ?? 20;
  if (nbCount < 1 || nbCount > 60_000) throw new Error('--nodebalancers must be between 1 and 60000 (the bench pool is 127.178.0.0/16)');
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-bench-prop-'));
  const cleanups: (() => Promise<void>)[] = [];
  stopChildrenOnSignal(async () => { for (const c of cleanups.reverse()) await c().catch(() => undefined); });
  process.stdout.write(`fulcrum propagation bench\nmachine: ${cpus().length} x ${cpus()[0]?.model ?? 'unknown'}; load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}; node ${process.version}\n\n`);

  const a = await nameServer('127.0.61.1', 'A');
  const b = await nameServer('127.0.61.2', 'B');
  cleanups.push(() => a.close(), () => b.close());
  const out: string[][] = [['measure', 'size', 'p50', 'p99', 'max', 'target']];
  let smallP99 = NaN;
  try {
    // 1. Small configuration.
    {
      const { cp, api } = await startBenchControlPlane(join(dir, 'cp-small'), '127.178.0.0/16');
      const dp = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: join(dir, 'dp-small'), logDir: dir });
      const lat = await writeToTraffic(api, cp, a, b, changes, 'small');
      await dp.stop();
      await cp.close();
      smallP99 = percentile(lat.writeToTrafficMs, 99);
      out.push(['API write -> traffic (ms)', `1 NodeBalancer, ${changes} changes`, fmt(percentile(lat.writeToTrafficMs, 50), 1), fmt(percentile(lat.writeToTrafficMs, 99), 1), fmt(Math.max(...lat.writeToTrafficMs), 1), 'p99 < 200']);
      out.push(['  of which the API call (ms)', '', fmt(percentile(lat.apiMs, 50), 1), fmt(percentile(lat.apiMs, 99), 1), fmt(Math.max(...lat.apiMs), 1), '']);
    }

    // 2. Large configuration.
    const { cp, api } = await startBenchControlPlane(join(dir, 'cp-large'), '127.178.0.0/16');
    cleanups.push(() => cp.close());
    const size = `${nbCount} NodeBalancers x 2 configs x 10 nodes`;
    process.stdout.write(`creating ${size} through the API...\n`);
    const tc = performance.now();
    await createMany(api, nbCount);
    const createS = (performance.now() - tc) / 1000;
    process.stdout.write(`  created in ${fmt(createS, 1)} s (${fmt(nbCount / createS)} NodeBalancers/s)\n`);

    const t0 = performance.now();
    const dpState = join(dir, 'dp-large');
    const dp = await startDataplaneProcess({ id: DP_ID, cp, grpcAddress: cp.grpcAddress, stateDir: dpState, logDir: dir });
    let peakWhileApplying = 0;
    const sampler = setInterval(() => (peakWhileApplying = Math.max(peakWhileApplying, memoryMb(dp.pid).rss)), 20);
    await waitForApplied(cp, api, DP_ID, 120_000);
    const startToAckMs = performance.now() - t0;
    clearInterval(sampler);
    const mem = memoryMb(dp.pid);
    process.stdout.write(`  data plane process start -> snapshot ACKed: ${fmt(startToAckMs)} ms; RSS ${fmt(mem.rss)} MB (peak ${fmt(mem.peak)} MB)\n`);

    process.stdout.write(`measuring API write -> traffic with ${size} loaded (${scaleChanges} changes)...\n`);
    const lat = await writeToTraffic(api, cp, a, b, scaleChanges, 'large');
    const memAfter = memoryMb(dp.pid);
    await dp.stop();

    process.stdout.write('applying the same snapshot in a fresh engine (one process, timed inside it)...\n');
    const snapFile = join(dpState, `dataplane-${DP_ID}.json`);
    const inProc = await applyInChild(snapFile);

    out.push(['API write -> traffic (ms)', `${size}, ${scaleChanges} changes`, fmt(percentile(lat.writeToTrafficMs, 50), 1), fmt(percentile(lat.writeToTrafficMs, 99), 1), fmt(Math.max(...lat.writeToTrafficMs), 1), '']);
    out.push(['  of which the API call (ms)', '', fmt(percentile(lat.apiMs, 50), 1), fmt(percentile(lat.apiMs, 99), 1), fmt(Math.max(...lat.apiMs), 1), '']);
    process.stdout.write(`\n${table(out)}\n\n`);

    const snapMb = inProc.snapshotBytes / (1024 * 1024);
    const rows = [
      ['snapshot: ' + size, `${nbCount * 2} listeners, ${nbCount * 20} nodes, ${fmt(snapMb, 1)} MB as JSON`],
      ['data plane process start -> ACK (spawn, gRPC connect, transfer, validate, bind, persist)', `${fmt(startToAckMs)} ms`],
      ['data plane RSS after apply / peak', `${fmt(mem.rss)} MB / ${fmt(Math.max(mem.peak, peakWhileApplying))} MB (after ${scaleChanges} more changes: ${fmt(memAfter.rss)} MB)`],
      ['engine.apply of that snapshot, timed in the process', `${fmt(inProc.applyMs)} ms (target < 1,000 ms)`],
      ['engine RSS after apply (fresh process) / heap used', `${fmt(inProc.rssAfterMb)} MB / ${fmt(inProc.heapUsedMb)} MB (target RSS < 300 MB)`],
      ['re-apply with one node weight changed', `${fmt(inProc.reapplyMs)} ms`],
    ];
    process.stdout.write(table([['large snapshot', 'result'], ...rows]) + '\n\n');

    const shortfalls: string[] = [];
    if (!(smallP99 < 200)) shortfalls.push(`API write -> traffic p99 ${fmt(smallP99, 1)} ms, target < 200 ms`);
    if (!(inProc.applyMs < 1000)) shortfalls.push(`snapshot apply ${fmt(inProc.applyMs)} ms, target < 1,000 ms`);
    if (!(mem.rss < 300)) shortfalls.push(`data plane RSS ${fmt(mem.rss)} MB, target < 300 MB`);
    if (shortfalls.length === 0) process.stdout.write('all propagation targets of issue 6 met in this run\n');
    else process.stdout.write(`SHORTFALL (targets of issue 6 not met in this run):\n${shortfalls.map((s) => `  - ${s}`).join('\n')}\n`);
  } finally {
    for (const c of cleanups.reverse()) await c().catch(() => undefined);
    await stopAll();
    if (f.keep) process.stdout.write(`logs kept in ${dir}\n`);
    else rmSync(dir, { recursive: true, force: true });
  }
}

async function writeToTraffic(api: Api, cp: Parameters<typeof waitForApplied>[0], a: NameServer, b: NameServer, changes: number, label: string): Promise<Latencies> {
  const nb = await api('POST', '/nodebalancers', {
    region: 'us-east', label: `bench-prop-${label}`,
    configs: [{ port: PORT, protocol: 'tcp', algorithm: 'roundrobin', stickiness: 'none', check: 'none', nodes: [{ label: 'moving-node', address: `${a.ip}:${a.port}` }] }],
  });
  const config = (await api('GET', `/nodebalancers/${nb.id}/configs`)).data[0];
  const node = (await api('GET', `/nodebalancers/${nb.id}/configs/${config.id}/nodes`)).data[0];
  await waitForApplied(cp, api, DP_ID, 120_000);
  await waitFor('the first answer through the NodeBalancer', async () => ((await whoAnswers(nb.ipv4, PORT)) === 'A' ? true : undefined), 30_000);
  const lat: Latencies = { writeToTrafficMs: [], apiMs: [] };
  for (let i = 0; i < changes; i++) {
    const to = i % 2 === 0 ? b : a;
    const want = to === a ? 'A' : 'B';
    const t0 = performance.now();
    await api('PUT', `/nodebalancers/${nb.id}/configs/${config.id}/nodes/${node.id}`, { address: `${to.ip}:${to.port}` });
    lat.apiMs.push(performance.now() - t0);
    // Probe with new connections until the new backend answers (each probe is a fresh connection).
    const deadline = t0 + 30_000;
    for (;;) {
      if ((await whoAnswers(nb.ipv4, PORT)) === want) break;
      if (performance.now() > deadline) throw new Error(`traffic did not follow change ${i + 1} within 30 s`);
    }
    lat.writeToTrafficMs.push(performance.now() - t0);
  }
  await api('DELETE', `/nodebalancers/${nb.id}`);
  return lat;
}

async function createMany(api: Api, count: number): Promise<void> {
  const nodes = Array.from({ length: 10 }, (_, i) => ({ label: `node-${i + 1}`, address: `127.0.62.${i + 1}:80`, weight: 100, mode: 'accept' }));
  const body = (i: number) => ({
    region: 'us-east', label: `scale-${String(i).padStart(5, '0')}`,
    configs: [
      { port: 80, protocol: 'http', algorithm: 'roundrobin', stickiness: 'none', check: 'none', nodes },
      { port: 8080, protocol: 'tcp', algorithm: 'leastconn', stickiness: 'none', check: 'none', nodes },
    ],
  });
  let next = 0;
  const worker = async () => {
    while (next < count) await api('POST', '/nodebalancers', body(next++));
  };
  await Promise.all(Array.from({ length: 4 }, worker));
}

function applyInChild(snapshotFile: string): Promise<{ applyMs: number; reapplyMs: number; rssAfterMb: number; heapUsedMb: number; snapshotBytes: number }> {
  const script = join(dirname(fileURLToPath(import.meta.url)), 'apply-snapshot.js');
  readFileSync(snapshotFile); // fails clearly if the data plane did not persist it
  return new Promise((resolve, reject) => {
    const p = spawn(process.execPath, [script, snapshotFile], { stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, FULCRUM_LOG_LEVEL: 'warn' } });
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

main().then(
  () => process.exit(0),
  async (err: Error) => {
    await stopAll();
    process.stderr.write(`bench:propagation failed: ${err.stack ?? err.message}\n`);
    process.exit(1);
  },
);
