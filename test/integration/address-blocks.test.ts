// integration-lane: concurrent (claims only octets 250-251, which no lab uses; a child process of its own).
import { spawn } from 'node:child_process';
import { describe, expect, it } from 'vitest';
import { claimOctet } from '../helpers/address-blocks.js';
import { repoRoot } from '../helpers/lab.js';

/**
 * test/helpers/address-blocks.ts: an octet is held by one process on the host at a time, until
 * released or until that process ends (docs/testing.md: two labs drawing the same octet reached
 * each other's databases).
 */
describe('claimOctet: address blocks held host-wide', () => {
  it('never gives one octet twice while held, and gives it again once released', async () => {
    const a = await claimOctet(250, 251);
    const b = await claimOctet(250, 251);
    expect([a.octet, b.octet].sort()).toEqual([250, 251]);
    await expect(claimOctet(250, 251)).rejects.toThrow(/held by another test/);
    await a.release();
    const c = await claimOctet(250, 251);
    expect(c.octet).toBe(a.octet);
    await Promise.all([b.release(), c.release()]);
  });

  it("keeps another process's claim out until that process ends", async () => {
    const child = spawn(process.execPath, ['--import', 'tsx', '-e',
      "import('./test/helpers/address-blocks.ts').then(async (m) => { const c = await m.claimOctet(250, 250); console.log('held', c.octet); setInterval(() => {}, 1000); })"], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
    try {
      await new Promise<void>((resolve, reject) => {
        child.stdout!.on('data', (d: Buffer) => (d.toString().includes('held 250') ? resolve() : undefined));
        child.once('exit', (code) => reject(new Error(`the claiming process exited (${code})`)));
      });
      await expect(claimOctet(250, 250)).rejects.toThrow(/held by another test/);
    } finally {
      const exited = new Promise((r) => child.once('exit', r));
      child.kill('SIGKILL');
      await exited;
    }
    // Killed, not released: the kernel dropped its claim with it.
    const again = await claimOctet(250, 250);
    expect(again.octet).toBe(250);
    await again.release();
  });
});
