import type { ChildProcess } from 'node:child_process';
import { cpSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runFulcrum, testRateLimitFlags, until } from './lab.js';

/**
 * Control-plane replicas, data planes and agents as real `fulcrum` processes, for the tests of
 * hosts moving between replicas. Every process keeps its log lines (pino JSON) for the printout.
 */
export interface Proc {
  readonly name: string;
  readonly proc: ChildProcess;
  /** Every line the process wrote to stdout or stderr so far. */
  readonly log: string[];
  /** All it wrote so far as one text, an unfinished last line included (for failure messages). */
  output(): string;
  /** Whether it has exited. */
  exited(): boolean;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export function startProc(name: string, args: string[]): Proc {
  const proc = runFulcrum(args);
  const log: string[] = [];
  let buf = '';
  const take = (d: Buffer) => {
    buf += d.toString();
    const lines = buf.split('\n');
    buf = lines.pop()!;
    log.push(...lines);
  };
  proc.stdout!.on('data', take);
  proc.stderr!.on('data', take);
  const exit = new Promise<void>((r) => proc.once('exit', () => r()));
  return {
    name,
    proc,
    log,
    output: () => [...log, buf].join('\n'),
    exited: () => proc.exitCode !== null || proc.signalCode !== null,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
      await exit;
    },
  };
}

export interface ReplicaProc extends Proc {
  apiUrl: string;
  grpcAddress: string;
  metricsUrl: string;
  adminToken: string;
}

/**
 * `fulcrum control-plane` on `store`, with its gRPC and bootstrap ports given (the hosts list
 * them), a metrics listener (its open-stream gauges say which hosts are on this replica) and the
 * tests' API rate limits (`testRateLimits`: the tests poll far more often than a client may).
 * Resolves once it has written control-plane.json; rejects, with its last lines, if it exits first.
 */
export async function startReplica(name: string, o: { stateDir: string; store: string; grpcPort: number; bootstrapPort: number; args?: string[] }): Promise<ReplicaProc> {
  const p = startProc(name, ['control-plane', '--state', o.stateDir, '--store', o.store, '--api-port', '0', '--grpc-port', String(o.grpcPort),
    '--bootstrap-port', String(o.bootstrapPort), '--metrics-port', '0', ...testRateLimitFlags, ...(o.args ?? [])]);
  const info = await until(`${name} started`, () => {
    if (p.exited()) throw new Error(`${name} exited: ${p.log.slice(-20).join('\n')}`);
    try {
      const j = JSON.parse(readFileSync(join(o.stateDir, 'control-plane.json'), 'utf8')) as { apiUrl: string; grpcAddress: string; metricsUrl: string; pid: number };
      return j.pid === p.proc.pid ? j : undefined;
    } catch {
      return undefined;
    }
  }, 120_000, 100);
  const adminToken = readFileSync(join(o.stateDir, 'admin-token'), 'utf8').trim();
  return Object.assign(p, { apiUrl: info.apiUrl, grpcAddress: info.grpcAddress, metricsUrl: info.metricsUrl, adminToken });
}

/** What a second replica needs from the first one's state folder (docs/install.md, "PostgreSQL"). */
export function copyReplicaKeys(from: string, to: string): void {
  for (const f of ['keys', 'pki', 'admin-token']) cpSync(join(from, f), join(to, f), { recursive: true });
}

/** The sum of a gauge or counter's samples on a Prometheus text page (NaN when absent). */
export async function metricValue(url: string, name: string): Promise<number> {
  const text = await (await fetch(url)).text();
  const samples = text.split('\n').filter((l) => l.startsWith(`${name} `) || l.startsWith(`${name}{`));
  return samples.length === 0 ? Number.NaN : samples.reduce((sum, l) => sum + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
}

/** A process's JSON log lines written at or after `since` (ms) that match `msg`. */
export function logLines(p: Proc, since: number, msg: RegExp): { time: number; msg: string; [k: string]: unknown }[] {
  const out: { time: number; msg: string }[] = [];
  for (const line of p.log) {
    if (!line.startsWith('{')) continue;
    try {
      const j = JSON.parse(line) as { time: number; msg: string };
      if (j.time >= since && msg.test(j.msg)) out.push(j);
    } catch {
      // not a log line
    }
  }
  return out;
}

/** Reconnect attempts and connections a host logged since `since`, one line each, for the printout. */
export function attemptLog(p: Proc, since: number): string[] {
  return logLines(p, since, /reconnect|connected|stream/).map((j) => {
    const f = j as { time: number; msg: string; why?: string; delay?: number; delayMs?: number; address?: string; next?: string };
    return `+${((f.time - since) / 1000).toFixed(2)}s ${f.msg} ${f.address ?? ''} -> ${f.next ?? ''} ${f.why ?? ''} delay=${f.delay ?? f.delayMs ?? ''}`;
  });
}
