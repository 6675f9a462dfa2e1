/**
 * The lab's log of a child's output (bin/lab.ts logOutput) against a log that cannot be written:
 * a real child process whose output goes to a log file linked to /dev/full (every write fails
 * with ENOSPC, as on a full disk).
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { logOutput } from '../../../bin/lab.js';

describe('the lab\'s log of a child\'s output', () => {
  let dir: string | undefined;
  afterEach(() => {
    vi.restoreAllMocks();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('on a full disk says so once and drops the output: the lab is not ended and the child is not blocked on a full pipe', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-lab-output-'));
    const file = join(dir, 'child.log');
    symlinkSync('/dev/full', file);
    const said: string[] = [];
    // 4 MB on each of stdout and stderr: far more than a pipe holds (64 KB), so the child ends
    // only if its output is read to the end.
    const proc = spawn(process.execPath, ['-e', 'const l = "x".repeat(1023) + "\\n"; for (let i = 0; i < 4096; i++) { process.stdout.write(l); process.stderr.write(l); }'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    logOutput(proc, file, 'child', (text) => said.push(text));
    const code = await new Promise<number | null>((resolve) => proc.once('close', resolve));
    expect(code).toBe(0);
    expect(said).toHaveLength(1);
    expect(said[0]).toMatch(/^lab: child's log .*child\.log cannot be written \(ENOSPC/);
  });
});
