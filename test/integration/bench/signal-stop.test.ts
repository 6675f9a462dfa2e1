import { spawn } from 'node:child_process';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot, until } from '../../helpers/lab.js';

const fixture = join(import.meta.dirname, 'signal-fixture.ts');

/** Starts the fixture, waits until it is ready, and gives its output and exit. */
async function start(mode: 'quick' | 'hang' | 'once', boundMs: number) {
  const proc = spawn(process.execPath, ['--import', 'tsx', fixture, mode, String(boundMs)], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const exited = new Promise<number | null>((r) => proc.once('exit', (code) => r(code)));
  await until('the fixture ready', () => {
    if (proc.exitCode !== null) throw new Error(`the fixture exited: ${out}`);
    return out.includes('ready\n');
  }, 30_000);
  return { proc, output: () => out, exited };
}

// bench/common/stops.ts: what a bench registered is stopped on SIGTERM, newest first, once,
// within a bound; a second signal exits at once.
describe('a bench\'s stops on a signal', () => {
  it('run newest first, then the children, and the bench exits 143', async () => {
    const b = await start('quick', 30_000);
    b.proc.kill('SIGTERM');
    expect(await b.exited).toBe(143);
    const lines = b.output().split('\n');
    expect(lines.filter((l) => l.startsWith('stopped') || l === 'children stopped')).toEqual(['stopped the newer', 'stopped the older (run 1)', 'children stopped']);
  }, 60_000);

  it('a stop its normal end already ran is not run again', async () => {
    const b = await start('once', 30_000);
    b.proc.kill('SIGTERM');
    expect(await b.exited).toBe(143);
    expect(b.output().match(/stopped the older/g)).toHaveLength(1);
    expect(b.output()).toContain('stopped the newer');
  }, 60_000);

  it('a stop that never returns holds the exit no longer than the bound', async () => {
    const b = await start('hang', 1_500);
    const t0 = Date.now();
    b.proc.kill('SIGTERM');
    expect(await b.exited).toBe(143);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(1_400);
    expect(b.output()).toMatch(/stopping took over 1.5 s; exiting with these still stopping: the newer; the older/);
  }, 60_000);

  it('a second SIGTERM exits at once, without waiting for the stops', async () => {
    const b = await start('hang', 600_000);
    b.proc.kill('SIGTERM');
    await until('the first SIGTERM taken', () => b.output().includes('SIGTERM: stopping what the bench started'), 30_000);
    b.proc.kill('SIGTERM');
    expect(await b.exited).toBe(143);
    expect(b.output()).toContain('SIGTERM again: exiting without waiting for the stops');
    expect(b.output()).not.toContain('stopped the older');
  }, 60_000);
});
