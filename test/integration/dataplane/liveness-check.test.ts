import { execFile, spawn } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Keepalived } from '../../../dataplane/vrrp/keepalived.js';
import { silentLogger } from '../../../lib/logger.js';

/**
 * Pair mode's liveness script (dataplane/vrrp/keepalived.ts, docs/multi-host.md "When the data
 * plane itself fails"), run as keepalived runs it, against this process as the data plane: it
 * passes while the data plane answers that it serves, fails when it says it does not, and fails
 * within its 0.8 s timeout while the data plane's event loop is held. keepalived itself is a
 * stand-in here (a sleeping process); the e2e pair test runs the real one.
 */
const dirs: string[] = [];
const stops: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const s of stops.splice(0)) await s();
  for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
});

/** Runs the script; its exit code and how long it took, measured by the shell, not by us. */
function runScript(script: string): Promise<{ code: number; ms: number }> {
  return new Promise((resolve, reject) => {
    execFile('sh', ['-c', 's=$(date +%s%N); "$1"; rc=$?; echo "$rc $(( ($(date +%s%N) - s) / 1000000 ))"', 'sh', script], (err, stdout) => {
      if (err) return reject(err);
      const [code, ms] = stdout.trim().split(' ').map(Number) as [number, number];
      resolve({ code, ms });
    });
  });
}

async function started(serving: () => boolean): Promise<{ dir: string; script: string }> {
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-alive-'));
  dirs.push(dir);
  const fake = join(dir, 'keepalived-stand-in');
  writeFileSync(fake, '#!/bin/sh\nexec sleep 600\n');
  chmodSync(fake, 0o700);
  const k = new Keepalived({ iface: 'eth0', peers: [], priority: 100, routerId: 51, name: 'dp', stateDir: dir, logger: silentLogger(), binary: fake, serving });
  await k.start(['198.18.100.2']);
  stops.push(() => k.stop());
  return { dir, script: join(dir, 'vrrp', 'dataplane-alive.sh') };
}

describe('the pair-mode liveness check', () => {
  it('passes while the data plane serves, fails when it says it does not, and is private to the data plane\'s user', async () => {
    let serving = true;
    const { dir, script } = await started(() => serving);
    expect((await runScript(script)).code).toBe(0);
    serving = false;
    // curl --fail: a 503 is exit code 22.
    expect((await runScript(script)).code).toBe(22);
    serving = true;
    expect((await runScript(script)).code).toBe(0);
    expect(statSync(join(dir, 'vrrp', 'alive.sock')).mode & 0o777).toBe(0o600);
    expect(statSync(join(dir, 'vrrp')).mode & 0o777).toBe(0o700);
    // Only the one question is answered.
    const other = await new Promise<string>((resolve) => execFile('curl', ['-s', '-o', '/dev/null', '-w', '%{http_code}', '--unix-socket', join(dir, 'vrrp', 'alive.sock'), 'http://dataplane/metrics'], (_e, out) => resolve(out)));
    expect(other).toBe('404');
  });

  it('fails within its timeout while the data plane\'s event loop is held, and passes again once it runs', async () => {
    const { script } = await started(() => true);
    expect((await runScript(script)).code).toBe(0);
    // The script runs in its own process while this event loop is held for 2.5 s (as a wedged
    // data plane's would be): nobody accepts its request.
    const result = runScript(script);
    await new Promise<void>((resolve) => {
      // Let the shell start before the loop is held.
      const p = spawn('true');
      p.once('exit', () => resolve());
    });
    Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 2_500);
    const held = await result;
    console.log(`[liveness-check] held event loop: the check failed with code ${held.code} after ${held.ms} ms`);
    // curl's --max-time: exit code 28.
    expect(held.code).toBe(28);
    expect(held.ms).toBeGreaterThanOrEqual(700);
    expect(held.ms).toBeLessThan(2_000);
    expect((await runScript(script)).code).toBe(0);
  });
});
