import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startLab, type RunningLab } from '../helpers/lab.js';
import { readmeBlock } from '../helpers/readme.js';

/** The README's five-minute quick start, curl version, word for word against a fresh lab. */
describe('README quick start (curl)', () => {
  let lab: RunningLab;
  let work: string;
  beforeAll(async () => {
    lab = await startLab();
    work = mkdtempSync(join(tmpdir(), 'console-readme-'));
  });
  afterAll(async () => {
    await lab?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('puts a NodeBalancer in front of two local backends and connects to a new database', async () => {
    const block = readmeBlock('### With curl');
    expect(block).toContain('$LINODE_URL');
    // Its own process group, so the backends it starts in the background end with it.
    const sh = spawn('bash', ['-euo', 'pipefail', '-c', block], {
      cwd: work, detached: true, stdio: ['ignore', 'pipe', 'pipe'],
      env: { ...process.env, LINODE_URL: lab.info.apiUrl, LINODE_TOKEN: lab.info.adminToken },
    });
    let out = '';
    sh.stdout!.on('data', (d) => (out += d));
    sh.stderr!.on('data', (d) => (out += d));
    let code: number | null;
    try {
      code = await new Promise<number | null>((resolve) => sh.once('exit', resolve));
    } finally {
      try { process.kill(-sh.pid!, 'SIGTERM'); } catch { /* already gone */ }
    }
    expect(code, out).toBe(0);
    expect(out).toContain('hello from 127.0.100.1');
    expect(out).toContain('hello from 127.0.100.2');
    const version = JSON.parse(readFileSync(join(work, 'db.json'), 'utf8')).version as string;
    expect(out).toContain(version);
  }, 420_000);
});
