/**
 * Runs wrk and reads its results from a Lua `done` hook (exact counts and latency percentiles
 * in microseconds) instead of parsing its human-readable report.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { run } from '../common/processes.js';

export interface WrkResult {
  requests: number;
  durationS: number;
  bytes: number;
  errors: { connect: number; read: number; write: number; status: number; timeout: number };
  p50Ms: number;
  p99Ms: number;
  reqPerS: number;
  mbPerS: number;
}

const SCRIPT = `
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    "WRK-RESULT %d %d %d %d %d %d %d %d %d %d\\n",
    summary.requests, summary.duration, summary.bytes,
    e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(99)))
end
`;

export interface WrkRun {
  url: string;
  connections: number;
  durationS: number;
  headers?: string[];
  timeoutS?: number;
  /** wrk threads (default 1; the bench gives one per proxy worker). */
  threads?: number;
}

export function wrkScript(dir: string): string {
  const file = join(dir, 'result.lua');
  writeFileSync(file, SCRIPT);
  return file;
}

export async function runWrk(wrkBin: string, script: string, r: WrkRun): Promise<WrkResult> {
  const args = [`-t${r.threads ?? 1}`, `-c${r.connections}`, `-d${r.durationS}s`, `--timeout`, `${r.timeoutS ?? 5}s`, '-s', script];
  for (const h of r.headers ?? []) args.push('-H', h);
  args.push(r.url);
  const out = await run(wrkBin, args, { timeoutMs: (r.durationS + 30) * 1000 });
  return parseWrkOutput(out);
}

/** Reads the WRK-RESULT line our Lua hook prints; throws, quoting wrk, when there is none. */
export function parseWrkOutput(out: string): WrkResult {
  const line = out.split('\n').find((l) => l.startsWith('WRK-RESULT '));
  if (!line) throw new Error(`wrk printed no result: ${out.trim()}`);
  const nums = line.trim().split(/\s+/).slice(1).map(Number);
  if (nums.length !== 10 || nums.some((n) => !Number.isFinite(n))) throw new Error(`unreadable wrk result line: ${line}`);
  const [requests, durationUs, bytes, connect, read, write, status, timeout, p50, p99] = nums as [number, number, number, number, number, number, number, number, number, number];
  const durationS = durationUs / 1e6;
  return {
    requests, durationS, bytes,
    errors: { connect, read, write, status, timeout },
    p50Ms: p50 / 1000, p99Ms: p99 / 1000,
    reqPerS: durationS > 0 ? requests / durationS : 0,
    mbPerS: durationS > 0 ? bytes / durationS / (1024 * 1024) : 0,
  };
}

export function errorCount(r: WrkResult): number {
  const e = r.errors;
  return e.connect + e.read + e.write + e.status + e.timeout;
}
