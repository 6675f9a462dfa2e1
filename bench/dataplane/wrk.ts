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
}

export function wrkScript(dir: string): string {
  const file = join(dir, 'result.lua');
  writeFileSync(file, SCRIPT);
  return file;
}

export async function runWrk(wrkBin: string, script: string, r: WrkRun): Promise<WrkResult> {
  const args = ['-t1', `-c${r.connections}`, `-d${r.durationS}s`, `--timeout`, `${r.timeoutS ?? 5}s`, '-s', script];
  for (const h of r.headers ?? []) args.push('-H', h);
  args.push(r.url);
  const out = await run(wrkBin, args, { timeoutMs: (r.durationS + 30) * 1000 });
  const line = out.split('\n').find((l) => l.startsWith('WRK-RESULT '));
  if (!line) throw new Error(`wrk printed no result: ${out.trim()}`);
  const [requests, durationUs, bytes, connect, read, write, status, timeout, p50, p99] = line.split(' ').slice(1).map(Number) as number[];
  const durationS = durationUs! / 1e6;
  return {
    requests: requests!, durationS, bytes: bytes!,
    errors: { connect: connect!, read: read!, write: write!, status: status!, timeout: timeout! },
    p50Ms: p50! / 1000, p99Ms: p99! / 1000,
    reqPerS: requests! / durationS,
    mbPerS: bytes! / durationS / (1024 * 1024),
  };
}

export function errorCount(r: WrkResult): number {
  const e = r.errors;
  return e.connect + e.read + e.write + e.status + e.timeout;
}
