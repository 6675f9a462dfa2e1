import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot, until } from '../helpers/lab.js';
import { cleanHosts, leftovers, sh } from '../helpers/hosts.js';

// A bench killed by SIGTERM (or Ctrl-C) stops what it started, not only its process group
// (bench/common/stops.ts): bench:provision once left its netns hosts, the agents' mariadbd
// processes (sessions of their own) and the Swift object store running. Each case runs a bench
// part with TMPDIR set to a folder of its own, so that everything the part makes on disk, and
// every process whose command line names such a path, is the part's; waits until the part's
// processes run; sends SIGTERM to the bench; and checks that none is left.

/** Live processes whose command line holds `text` (zombies count as gone). */
function processesNaming(text: string): { pid: number; cmd: string }[] {
  const out: { pid: number; cmd: string }[] = [];
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const cmd = readFileSync(`/proc/${name}/cmdline`, 'utf8').replaceAll('\0', ' ');
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      if (cmd.includes(text) && stat[stat.lastIndexOf(')') + 2] !== 'Z') out.push({ pid: Number(name), cmd });
    } catch {
      // ended meanwhile
    }
  }
  return out;
}

const TSX_CACHE = `tsx-${process.getuid!()}`;

/** What the part left in its TMPDIR, apart from tsx's cache and what `keep` says is kept. */
function leftIn(tmp: string, keep = (_name: string) => false): string[] {
  return readdirSync(tmp).filter((n) => n !== TSX_CACHE && !keep(n));
}

/** Docker containers of an agent whose state is under `tmp` (the runtime labels each with its root). */
async function containersUnder(tmp: string): Promise<string[]> {
  const { stdout } = await sh('docker', ['ps', '-a', '--filter', 'label=fulcrum.runtime=docker', '--format', '{{.Names}} {{.Label "fulcrum.runtime-root"}}']);
  return stdout.split('\n').filter((l) => l.split(' ')[1]?.startsWith(`${tmp}/`)).map((l) => l.split(' ')[0]!);
}

interface Bench { proc: ChildProcess; output(): string; exited: Promise<number | null> }

/** `bench/provision/run.ts <args>` from the sources, its temp folders under `tmp`. */
function provisionBench(tmp: string, args: string[]): Bench {
  // tsx keeps its compile cache in TMPDIR: the machine's, so that the bench does not compile
  // every source again (and the cache is no leftover of the bench's).
  symlinkSync(join(tmpdir(), TSX_CACHE), join(tmp, TSX_CACHE));
  const proc = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'bench', 'provision', 'run.ts'), ...args], {
    cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'], env: { ...process.env, TMPDIR: tmp },
  });
  let out = '';
  proc.stdout!.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr!.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  return { proc, output: () => out, exited };
}

/** Whatever is still left after a case failed: so no run leaves it for the next one. */
async function sweep(bench: Bench, tmp: string): Promise<void> {
  // The supervised bench runs in a process group of its own, the supervisor's child.
  const pid = bench.proc.pid!;
  let kids: number[] = [];
  try {
    kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    // the supervisor has exited
  }
  for (const target of [...kids.map((k) => -k), pid]) {
    try {
      process.kill(target, 'SIGKILL');
    } catch {
      // gone
    }
  }
  for (const p of processesNaming(tmp)) {
    try {
      process.kill(p.pid, 'SIGKILL');
    } catch {
      // gone
    }
  }
  rmSync(tmp, { recursive: true, force: true, maxRetries: 3 });
}

describe('a bench stopped by SIGTERM', () => {
  it('provision part: the agent\'s mariadbd and the temp folders are gone', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'fulcrum-bss-'));
    const bench = provisionBench(tmp, ['--only', 'provision', '--runtimes', 'process', '--rounds', '1']);
    try {
      // The agent's mariadbd runs in a session of its own: outside the bench's process group.
      const servers = await until('a mariadbd of the bench', () => {
        if (bench.proc.exitCode !== null) throw new Error(`the bench exited: ${bench.output()}`);
        const found = processesNaming(tmp).filter((p) => p.cmd.includes('mariadbd'));
        return found.length > 0 ? found : undefined;
      }, 120_000, 200);
      const t0 = Date.now();
      bench.proc.kill('SIGTERM');
      const code = await bench.exited;
      console.log(`provision part: stopped ${((Date.now() - t0) / 1000).toFixed(1)} s after SIGTERM`);
      await until('no process of the bench left', () => processesNaming(tmp).length === 0, 30_000, 200)
        .catch(() => expect(processesNaming(tmp), `mariadbd was ${servers.map((s) => s.pid).join(', ')}`).toEqual([]));
      expect(leftIn(tmp)).toEqual([]);
      expect(bench.output()).toMatch(/SIGTERM: stopping what the bench started/);
      expect(code, bench.output()).toBe(143);
    } finally {
      await sweep(bench, tmp);
    }
  }, 180_000);

  it('provision part on docker: the agent\'s containers and the temp folders are gone', async () => {
    const tmp = mkdtempSync(join(tmpdir(), 'fulcrum-bss-'));
    const bench = provisionBench(tmp, ['--only', 'provision', '--runtimes', 'docker', '--rounds', '1']);
    try {
      // A container is dockerd's child, in no process group of the bench's.
      const made = await until('a container of the bench', async () => {
        if (bench.proc.exitCode !== null) throw new Error(`the bench exited: ${bench.output()}`);
        const found = await containersUnder(tmp);
        return found.length > 0 ? found : undefined;
      }, 120_000, 250);
      const t0 = Date.now();
      bench.proc.kill('SIGTERM');
      const code = await bench.exited;
      console.log(`provision part on docker: stopped ${((Date.now() - t0) / 1000).toFixed(1)} s after SIGTERM`);
      expect(await containersUnder(tmp), `the bench had made ${made.join(', ')}`).toEqual([]);
      expect(leftIn(tmp)).toEqual([]);
      expect(code, bench.output()).toBe(143);
    } finally {
      await sweep(bench, tmp);
      for (const c of await containersUnder(tmp).catch(() => [])) await sh('docker', ['rm', '-f', '-v', c], true);
    }
  }, 180_000);

  it('re-placement part: its netns hosts, veths, bridge, rule, fleet processes and object store are gone', async () => {
    // bench/provision/replace.ts's own netns prefix.
    const prefix = 'brp';
    const tmp = mkdtempSync(join(tmpdir(), 'fulcrum-bss-'));
    const bench = provisionBench(tmp, ['--only', 'replace', '--replace-mb', '1']);
    try {
      // The fleet's processes run inside the namespaces and the Swift servers in the root one.
      await until('the fleet\'s agents and the object store running', async () => {
        if (bench.proc.exitCode !== null) throw new Error(`the bench exited: ${bench.output()}`);
        const inAgentHost = (await sh('ip', ['netns', 'pids', `${prefix}-ag4`], true)).stdout.trim() !== '';
        return inAgentHost && processesNaming(tmp).some((p) => p.cmd.includes('swift-')) ? true : undefined;
      }, 150_000, 250);
      expect((await leftovers(prefix)).length).toBeGreaterThan(0);
      const t0 = Date.now();
      bench.proc.kill('SIGTERM');
      const code = await bench.exited;
      console.log(`re-placement part: stopped ${((Date.now() - t0) / 1000).toFixed(1)} s after SIGTERM`);
      expect(await leftovers(prefix)).toEqual([]);
      await until('no process of the bench left', () => processesNaming(tmp).length === 0, 30_000, 200)
        .catch(() => expect(processesNaming(tmp)).toEqual([]));
      // The fleet's output is kept on purpose (bench-replace-log-*); its state and the store's are not.
      expect(leftIn(tmp, (n) => n.startsWith('bench-replace-log-'))).toEqual([]);
      expect(code, bench.output()).toBe(143);
    } finally {
      await sweep(bench, tmp);
      await cleanHosts(prefix);
    }
  }, 240_000);
});
