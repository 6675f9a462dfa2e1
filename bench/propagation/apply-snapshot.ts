/**
 * Child process of bench:propagation: a fresh data-plane engine (the same createProxyEngine the
 * data plane process runs) applies a snapshot file, so that the time and memory of the apply
 * itself are measured inside one process, without gRPC or the control plane around it.
 * Prints one JSON line. Usage: node apply-snapshot.js SNAPSHOT.json [--wildcard] (wildcard
 * listeners: one socket per port, as the data plane with --wildcard-listeners).
 */
import { readFileSync } from 'node:fs';
import { performance } from 'node:perf_hooks';
import { createProxyEngine } from '../../dataplane/main.js';
import type { SnapshotInput } from '../../dataplane/config/validate.js';

const mb = (n: number) => Math.round((n / (1024 * 1024)) * 10) / 10;

async function main(): Promise<void> {
  const text = readFileSync(process.argv[2]!, 'utf8');
  const snapshot = JSON.parse(text) as SnapshotInput & { version: number };
  const rssBefore = process.memoryUsage().rss;
  const engine = createProxyEngine({ wildcard: process.argv.includes('--wildcard') });
  const t0 = performance.now();
  await engine.apply(snapshot);
  const applyMs = performance.now() - t0;
  const after = process.memoryUsage();

  // The next snapshot differs in one node's weight: the cost of a small change at this size.
  const next = JSON.parse(text) as typeof snapshot;
  next.version = Number(snapshot.version) + 1;
  const node = next.nodebalancers![0]!.configs![0]!.nodes![0]!;
  node.weight = Number(node.weight ?? 1) === 50 ? 60 : 50;
  const t1 = performance.now();
  await engine.apply(next);
  const reapplyMs = performance.now() - t1;
  const t2 = performance.now();
  await engine.close();
  const closeMs = performance.now() - t2;
  process.stdout.write(JSON.stringify({
    applyMs, reapplyMs, closeMs, snapshotBytes: text.length,
    rssBeforeMb: mb(rssBefore), rssAfterMb: mb(after.rss), heapUsedMb: mb(after.heapUsed), peakRssMb: mb(process.resourceUsage().maxRSS * 1024),
  }) + '\n');
}

main().then(() => process.exit(0), (err: Error) => {
  process.stderr.write(`apply-snapshot: ${err.stack ?? err.message}\n`);
  process.exit(1);
});
