import type { ChildProcess } from 'node:child_process';
import { cpSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { runFulcrum, testRateLimits, until } from '../../helpers/lab.js';

/** A `fulcrum control-plane` (or data plane, agent) child process and everything it printed. */
export interface Proc {
  name: string;
  proc: ChildProcess;
  output(): string;
  alive(): boolean;
  /** SIGTERM (or the given signal) and wait for the exit. */
  stop(signal?: NodeJS.Signals): Promise<void>;
}

export function spawnProc(name: string, args: string[]): Proc {
  const proc = runFulcrum(args);
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const alive = () => proc.exitCode === null && proc.signalCode === null;
  return {
    name,
    proc,
    output: () => out,
    alive,
    async stop(signal: NodeJS.Signals = 'SIGTERM') {
      if (!alive()) return;
      const gone = new Promise((r) => proc.once('exit', r));
      proc.kill(signal);
      await gone;
    },
  };
}

export interface Replica extends Proc {
  apiUrl: string;
  grpcAddress: string;
  adminToken: string;
}

const LIMIT_FLAGS = ['--api-rate-limit', String(testRateLimits.perToken), '--api-ip-rate-limit', String(testRateLimits.perIp),
  '--api-stats-rate-limit', String(testRateLimits.stats)];

/**
 * One control-plane replica as its own process on a PostgreSQL store, on fixed gRPC and
 * bootstrap ports (the hosts' address list names them), waiting for its control-plane.json.
 */
export async function startReplica(name: string, o: {
  stateDir: string; store: string; grpcPort: number; bootstrapPort: number; args: string[];
}): Promise<Replica> {
  const p = spawnProc(name, ['control-plane', '--state', o.stateDir, '--store', o.store, '--api-port', '0', '--grpc-port', String(o.grpcPort),
    '--bootstrap-port', String(o.bootstrapPort), ...LIMIT_FLAGS, ...o.args]);
  const info = await until(`${name} ready`, () => {
    if (!p.alive()) throw new Error(`${name} exited: ${p.output()}`);
    try {
      const j = JSON.parse(readFileSync(join(o.stateDir, 'control-plane.json'), 'utf8')) as { apiUrl: string; grpcAddress: string; pid: number };
      return j.pid === p.proc.pid ? j : undefined;
    } catch {
      return undefined;
    }
  }, 120_000, 100);
  return { ...p, apiUrl: info.apiUrl, grpcAddress: info.grpcAddress, adminToken: readFileSync(join(o.stateDir, 'admin-token'), 'utf8').trim() };
}

/** What a second replica needs from the first one's state folder (docs/install.md, "PostgreSQL"). */
export function copyReplicaKeys(from: string, to: string): void {
  for (const f of ['keys', 'pki', 'admin-token']) cpSync(join(from, f), join(to, f), { recursive: true });
}
