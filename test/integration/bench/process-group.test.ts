import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot, until } from '../../helpers/lab.js';

const fixture = join(import.meta.dirname, 'group-fixture.ts');

/** Whether a pid is a live process (a zombie waiting for its parent counts as gone). */
function alive(pid: number): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2, stat.lastIndexOf(')') + 3) !== 'Z';
  } catch {
    return false;
  }
}

// bench:dataplane once died in native code and left its data plane, HAProxy and nginx running:
// a bench runs in a process group of its own, which bench/common/processes.ts stops once the
// bench has exited, however it exited.
describe('a bench that dies without cleaning up', () => {
  it('has what it started stopped by its supervisor, and fails', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'bench-group-'));
    let sleeper = 0;
    try {
      const sup = spawn(process.execPath, ['--import', 'tsx', fixture, dir], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
      let out = '';
      let err = '';
      sup.stdout.on('data', (d: Buffer) => (out += d.toString()));
      sup.stderr.on('data', (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((resolve) => sup.once('exit', (c) => resolve(c)));
      sleeper = Number(/sleeper (\d+)/.exec(out)?.[1] ?? 0);
      expect(sleeper, `the fixture's output: ${out}${err}`).toBeGreaterThan(0);
      expect(code).not.toBe(0);
      expect(err).toMatch(/group-fixture: the bench process ended by SIGABRT/);
      expect(err).toMatch(/stopped what it left running \(process group \d+, 1 process\(es\)\)/);
      // Gone, not only signalled: init reaps the orphan, which can take a moment on a busy machine.
      await until('the bench\'s child to be gone', () => !alive(sleeper), 20_000);
    } finally {
      if (sleeper > 0 && alive(sleeper)) process.kill(sleeper, 'SIGKILL');
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
