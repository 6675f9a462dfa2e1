/**
 * Child processes and system tools for the benchmarks. Every process a bench starts is tracked
 * here and stopped (by its own pid, never by name) when the bench ends, including on Ctrl-C; and
 * a bench run under superviseInOwnGroup has anything left in its process group stopped after it
 * exits, however it exited.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createWriteStream, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { stopAndExit, stopOnSignals, stopping } from './stops.js';

const children = new Set<ChildProcess>();

export interface Spawned {
  proc: ChildProcess;
  pid: number;
  stop(): Promise<void>;
}

/** Starts a long-running child with its output in `<logDir>/<name>.log`. */
export function startProcess(name: string, cmd: string, args: string[], logDir: string, env: NodeJS.ProcessEnv = process.env, cwd?: string): Spawned {
  const log = createWriteStream(join(logDir, `${name}.log`), { flags: 'a' });
  const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'], env, cwd });
  proc.stdout!.pipe(log);
  proc.stderr!.pipe(log);
  children.add(proc);
  proc.once('exit', () => children.delete(proc));
  if (proc.pid === undefined) throw new Error(`could not start ${cmd}`);
  return {
    proc,
    pid: proc.pid,
    stop: () => stopChild(proc),
  };
}

export function stopChild(proc: ChildProcess, graceMs = 10_000): Promise<void> {
  if (proc.exitCode !== null || proc.signalCode !== null) return Promise.resolve();
  return new Promise((resolve) => {
    const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
    proc.once('exit', () => {
      clearTimeout(kill);
      resolve();
    });
    proc.kill('SIGTERM');
  });
}

export async function stopAll(): Promise<void> {
  await Promise.all([...children].map((c) => stopChild(c)));
}

/**
 * Stops the bench on SIGINT/SIGTERM (or an uncaught error): what it registered with onStop
 * (stops.ts), then `cleanup`, then its tracked children; bounded, and a second signal exits at once.
 */
export function stopChildrenOnSignal(cleanup: () => Promise<void> = async () => {}, label = 'bench'): void {
  stopOnSignals(label, async () => {
    await cleanup().catch(() => undefined);
    await stopAll();
  });
}

/** Set in the bench process that superviseInOwnGroup starts, so that it runs the bench itself. */
const SUPERVISED_ENV = 'FULCRUM_BENCH_SUPERVISED';

/**
 * Runs the bench in a process group of its own and stops that whole group when the bench ends,
 * however it ends. try/finally and stopAll() cover errors the bench's JavaScript sees, but not a
 * process that dies in native code (an abort) or by SIGKILL: its nginx, HAProxy and data plane
 * would outlive it. So this process re-runs itself as a child in a new process group (everything
 * the bench starts inherits that group), runs no bench code itself, passes Ctrl-C and SIGTERM on
 * to it, and once it has exited signals whatever is left in the group: SIGTERM, then SIGKILL after
 * `graceMs`. Returns true in the child (run the bench there) and false in this supervisor, which
 * exits with the bench's status when done.
 */
export function superviseInOwnGroup(label: string, graceMs = 10_000): boolean {
  if (process.env[SUPERVISED_ENV] === '1') return true;
  const bench = spawn(process.execPath, [...process.execArgv, ...process.argv.slice(1)], {
    detached: true, stdio: 'inherit', env: { ...process.env, [SUPERVISED_ENV]: '1' },
  });
  // Ctrl-C reaches the terminal's foreground group, which is ours and not the bench's: pass it on
  // to the bench alone, so that its own handler stops what it started in order.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) process.on(sig, () => bench.kill(sig));
  bench.once('error', (err) => {
    process.stderr.write(`${label}: could not start: ${err.message}\n`);
    process.exit(1);
  });
  bench.once('exit', (code, signal) => {
    const group = bench.pid!;
    void stopGroup(group, graceMs).then((left) => {
      if (signal !== null) process.stderr.write(`${label}: the bench process ended by ${signal}\n`);
      if (left > 0 || signal !== null) process.stderr.write(`${label}: stopped what it left running (process group ${group}, ${left} process(es))\n`);
      process.exit(code ?? 1);
    });
  });
  return false;
}

/**
 * A bench's entry: `main` runs in a process group of its own (superviseInOwnGroup), so that
 * whatever it started is stopped even if it dies without running its finally blocks (an abort in
 * native code, SIGKILL). A signal, a failure and the end of `main` all leave through stopAndExit
 * (stops.ts): what the bench registered with onStop, then the children it knows of. `main` may
 * return the exit code (0 when it returns nothing).
 */
export function runBench(label: string, main: () => Promise<number | void>): void {
  if (!superviseInOwnGroup(label)) return;
  stopOnSignals(label, stopAll);
  main().then(
    (code) => stopAndExit(label, code ?? 0, stopAll),
    (err: Error) => {
      // After a signal the bench's own code fails as what it uses is torn down: that exit stands.
      if (stopping()) return;
      process.stderr.write(`${label} failed: ${err.stack ?? err.message}\n`);
      return stopAndExit(label, 1, stopAll);
    },
  );
}

/**
 * Stops every process of a process group: SIGTERM, then SIGKILL after `graceMs`; resolves once
 * the group is empty, with the number of processes that were still in it.
 */
export async function stopGroup(pgid: number, graceMs: number): Promise<number> {
  const members = groupMembers(pgid);
  if (!signalGroup(pgid, 'SIGTERM')) return 0;
  const deadline = Date.now() + graceMs;
  while (signalGroup(pgid, 0)) {
    if (Date.now() > deadline) {
      signalGroup(pgid, 'SIGKILL');
      await new Promise((r) => setTimeout(r, 100));
      if (Date.now() > deadline + 5_000) break;
    } else {
      await new Promise((r) => setTimeout(r, 50));
    }
  }
  return members;
}

/** Signals a process group; false when it has no process left. */
function signalGroup(pgid: number, sig: NodeJS.Signals | 0): boolean {
  try {
    process.kill(-pgid, sig);
    return true;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ESRCH') return false;
    throw e;
  }
}

/** How many processes are in a process group now (from /proc; 0 when /proc cannot be read). */
function groupMembers(pgid: number): number {
  let n = 0;
  try {
    for (const pid of readdirSync('/proc')) {
      if (!/^\d+$/.test(pid)) continue;
      try {
        const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
        // Field 5 (pgrp), the third after the command name.
        if (Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[2]) === pgid) n++;
      } catch {
        // The process ended meanwhile.
      }
    }
  } catch {
    // No /proc: the count is only for the message.
  }
  return n;
}

/** Finds each tool on PATH (or /usr/sbin), installing its apt package when missing. */
export function ensureTools(tools: Record<string, string>): Record<string, string> {
  const found: Record<string, string> = {};
  const missing: string[] = [];
  for (const [tool, pkg] of Object.entries(tools)) {
    const path = which(tool);
    if (path) found[tool] = path;
    else missing.push(pkg);
  }
  if (missing.length > 0) {
    process.stdout.write(`installing ${missing.join(', ')} with apt-get...\n`);
    const env = { ...process.env, DEBIAN_FRONTEND: 'noninteractive' };
    spawnSync('apt-get', ['update', '-qq'], { stdio: 'inherit', env });
    const r = spawnSync('apt-get', ['install', '-y', '-qq', '--no-install-recommends', ...missing], { stdio: 'inherit', env });
    if (r.status !== 0) throw new Error(`apt-get install ${missing.join(' ')} failed; install them by hand`);
    for (const tool of Object.keys(tools)) {
      const path = which(tool);
      if (!path) throw new Error(`${tool} still not found after installing its package`);
      found[tool] = path;
    }
  }
  return found;
}

function which(tool: string): string | undefined {
  const r = spawnSync('sh', ['-c', `command -v ${tool} || ls /usr/sbin/${tool} 2>/dev/null`], { encoding: 'utf8' });
  const out = r.stdout.trim().split('\n')[0];
  return out ? out : undefined;
}

/** Runs a command to completion, returning stdout; throws with stderr on a non-zero exit. */
export function run(cmd: string, args: string[], opts: { timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const proc = spawn(cmd, args, { stdio: ['ignore', 'pipe', 'pipe'] });
    children.add(proc);
    let out = '';
    let err = '';
    proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    proc.stderr!.on('data', (d: Buffer) => (err += d.toString()));
    const timer = opts.timeoutMs ? setTimeout(() => proc.kill('SIGKILL'), opts.timeoutMs) : undefined;
    proc.once('error', reject);
    proc.once('exit', (code, signal) => {
      children.delete(proc);
      if (timer) clearTimeout(timer);
      if (code === 0) resolve(out);
      else reject(new Error(`${cmd} ${args.join(' ')} exited with ${code ?? signal}: ${err.trim() || out.trim()}`));
    });
  });
}

/** CPU seconds a process has used so far in user space and in the kernel, from /proc/<pid>/stat. */
export function cpuTimes(pid: number): { user: number; sys: number } {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // utime and stime are fields 14 and 15 of the file, 12 and 13 after the command name (ticks of 1/100 s).
    return { user: Number(fields[11]) / 100, sys: Number(fields[12]) / 100 };
  } catch {
    return { user: NaN, sys: NaN };
  }
}

/**
 * CPU time of a process and its children alive now (a data plane's primary and its workers);
 * a child that exited in between takes its share with it.
 */
export function treeCpuTimes(pid: number): { user: number; sys: number } {
  const t = cpuTimes(pid);
  let kids: string[] = [];
  try {
    kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean);
  } catch {
    // No children file: the process alone.
  }
  for (const k of kids) {
    const c = cpuTimes(Number(k));
    if (Number.isFinite(c.user)) {
      t.user += c.user;
      t.sys += c.sys;
    }
  }
  return t;
}

/** CPU seconds (user + system) a process has used so far. */
export function cpuSeconds(pid: number): number {
  const t = cpuTimes(pid);
  return t.user + t.sys;
}

/** Resident and peak resident memory of a process, in MB, from /proc/<pid>/status. */
export function memoryMb(pid: number): { rss: number; peak: number } {
  try {
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const kb = (key: string) => Number(new RegExp(`^${key}:\\s+(\\d+)`, 'm').exec(status)?.[1] ?? NaN);
    return { rss: kb('VmRSS') / 1024, peak: kb('VmHWM') / 1024 };
  } catch {
    return { rss: NaN, peak: NaN };
  }
}

/**
 * RSS of a process and all its descendants (a data plane's primary and its workers), in MB;
 * `peak` sums each one's own peak, an upper bound on the tree's peak.
 */
export function treeMemoryMb(pid: number): { rss: number; peak: number; processes: number } {
  const all = [pid];
  for (let i = 0; i < all.length; i++) {
    try {
      for (const task of readdirSync(`/proc/${all[i]}/task`)) {
        const kids = readFileSync(`/proc/${all[i]}/task/${task}/children`, 'utf8').trim();
        if (kids !== '') all.push(...kids.split(/\s+/).map(Number));
      }
    } catch {
      // The process ended meanwhile.
    }
  }
  const each = all.map(memoryMb).filter((m) => !Number.isNaN(m.rss));
  return { rss: each.reduce((a, m) => a + m.rss, 0), peak: each.reduce((a, m) => a + m.peak, 0), processes: each.length };
}

/** Thrown from a waitFor condition to stop waiting at once (the thing waited for died). */
export class GiveUp extends Error {}

/** Polls `fn` until it returns a value, failing with `what` after the timeout. */
export async function waitFor<T>(what: string, fn: () => T | undefined | Promise<T | undefined>, timeoutMs = 30_000, everyMs = 50): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  let lastErr: unknown;
  while (Date.now() < deadline) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (e) {
      if (e instanceof GiveUp) throw e;
      lastErr = e;
    }
    await new Promise((r) => setTimeout(r, everyMs));
  }
  throw new Error(`timed out waiting for ${what}${lastErr ? ` (last error: ${(lastErr as Error).message})` : ''}`);
}
