import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

export const repoRoot = resolve(import.meta.dirname, '..', '..');
const cli = join(repoRoot, 'bin', 'fulcrum.js');

export interface LabInfo {
  apiUrl: string;
  /** The web console (docs/console.md); the lab's printed link adds `#token=` to it. */
  consoleUrl: string;
  grpcAddress: string;
  adminToken: string;
  stateDir: string;
  pids: { lab: number; controlPlane: number; dataplane: number; agent: number };
  /** The lab's IPv6 range for NodeBalancers, null when it could not make one local (not root). */
  nodebalancerIpv6Pool: string | null;
  metrics: { controlPlane: string; dataplane: string; agent: string };
  /** The lab CA's certificate when the lab serves HTTPS (`--api-tls`). */
  apiCaFile?: string;
}

export interface RunningLab {
  info: LabInfo;
  proc: ChildProcess;
  output: () => string;
  stop(): Promise<void>;
}

/** Polls `fn` until it returns a value other than undefined/false, or fails after `timeoutMs`. */
export async function until<T>(what: string, fn: () => T | undefined | false | Promise<T | undefined | false>, timeoutMs = 20_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const v = await fn();
      if (v !== undefined && v !== false) return v;
    } catch (err) {
      last = err;
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}${last ? `: ${(last as Error).message}` : ''}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * Waits for `p`, but fails naming `what` if it takes longer than `ms`: a teardown step that hangs
 * then says which one it was, instead of a bare hook timeout.
 */
export async function within<T>(what: string, ms: number, p: Promise<T> | T): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(new Error(`${what} did not finish within ${ms} ms`)), ms);
  });
  try {
    return await Promise.race([Promise.resolve(p), late]);
  } finally {
    clearTimeout(timer);
  }
}

/** A `fulcrum control-plane` process started by startControlPlaneProcess. */
export interface ControlPlaneProcess {
  proc: ChildProcess;
  info: { apiUrl: string; bootstrapAddress: string; metricsUrl: string | null };
  /** Everything it printed so far, stdout and stderr. */
  output: () => string;
}

/**
 * `fulcrum control-plane --state STATE` on API and gRPC port 0 plus `args`, from the sources;
 * resolves once it has written its control-plane.json, and fails with what it printed if it exits
 * first.
 */
export async function startControlPlaneProcess(state: string, args: string[]): Promise<ControlPlaneProcess> {
  const proc = runFulcrum(['control-plane', '--state', state, '--api-port', '0', '--grpc-port', '0', ...args]);
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  // An exit ends the wait at once (until() would keep polling past a thrown error).
  const info = await until('control-plane.json', () => {
    if (proc.exitCode !== null) return { exited: true };
    try {
      const j = JSON.parse(readFileSync(join(state, 'control-plane.json'), 'utf8'));
      return j.pid === proc.pid ? j : undefined;
    } catch {
      return undefined;
    }
  }, 60_000, 100);
  if (info.exited) throw new Error(`control plane exited: ${out}`);
  return { proc, info, output: () => out };
}

/** Runs `fulcrum <args>` from the TypeScript sources (no stale build can be tested). */
export function runFulcrum(args: string[]): ChildProcess {
  return spawn(process.execPath, [cli, ...args], {
    cwd: repoRoot,
    env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'info' },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
}

/**
 * The e2e tests poll the API every 50-200 ms for up to minutes with one admin token, past the
 * product's 400 requests per token per minute (docs/security/api.md): their labs raise the limits
 * explicitly. test/security/api-tls-limits.test.ts checks the product defaults.
 */
export const testRateLimits = { perToken: 100_000, perIp: 100_000, stats: 100_000 };
/** The same limits as `fulcrum control-plane` (or `lab`) flags. */
export const testRateLimitFlags = ['--api-rate-limit', String(testRateLimits.perToken), '--api-ip-rate-limit', String(testRateLimits.perIp),
  '--api-stats-rate-limit', String(testRateLimits.stats)];

/**
 * Starts `fulcrum lab` in a fresh (or given) state folder and waits for lab.json and its banner:
 * on random ports, or on `apiPort` and the two after it (gRPC, bootstrap).
 */
export async function startLab(opts: { stateDir?: string; runtime?: 'process' | 'docker'; apiPort?: number } = {}): Promise<RunningLab> {
  const stateDir = opts.stateDir ?? mkdtempSync(join(tmpdir(), 'fulcrum-lab-'));
  const proc = runFulcrum(['lab', '--state', stateDir, '--api-port', String(opts.apiPort ?? 0), '--runtime', opts.runtime ?? 'process', ...testRateLimitFlags]);
  let out = '';
  proc.stdout!.on('data', (d) => (out += d));
  proc.stderr!.on('data', (d) => (out += d));
  const info = await until('lab.json', () => {
    if (proc.exitCode !== null) throw new Error(`lab exited early: ${out}`);
    try {
      const j = JSON.parse(readFileSync(join(stateDir, 'lab.json'), 'utf8')) as LabInfo;
      return j.pids.lab === proc.pid ? j : undefined;
    } catch {
      return undefined;
    }
  }, 90_000, 100);
  // The lab writes lab.json just before its banner, and the banner reaches us through a pipe: a
  // test that reads the banner's export lines right after lab.json could see nothing yet (a CI run
  // did, on a loaded host).
  await until('the lab banner', () => {
    if (proc.exitCode !== null) throw new Error(`lab exited early: ${out}`);
    return out.includes('Press Ctrl-C to stop.');
  }, 30_000, 50);
  return {
    info,
    proc,
    output: () => out,
    async stop() {
      if (proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once('exit', r));
      proc.kill('SIGINT');
      await exited;
    },
  };
}

/** A minimal JSON client for the REST API. */
export function api(baseUrl: string, token: string) {
  return async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const res = await fetch(`${baseUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json', ...headers },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, headers: res.headers, body: text ? JSON.parse(text) : undefined };
  };
}

/** Whether a process with this pid exists (signal 0 only asks). */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/**
 * The e2e labs' JSON client for the REST API as the admin: `api` answers any status below 500
 * (a 5xx is a product defect and throws with its body), `ok` only a 200 (anything else throws,
 * naming the call and the answer).
 */
export function apiCalls(baseUrl: string, token: string) {
  const call = async <T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }> => {
    const res = await fetch(baseUrl + path, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (res.status >= 500) throw new Error(`${method} ${path} -> ${res.status} ${text}`);
    return { status: res.status, body: JSON.parse(text) as T };
  };
  const ok = async <T = any>(method: string, path: string, body?: unknown): Promise<T> => {
    const r = await call<T>(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  return { api: call, ok };
}
