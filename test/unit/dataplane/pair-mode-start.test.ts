import { spawn } from 'node:child_process';
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { Keepalived, ensureNonlocalBind } from '../../../dataplane/vrrp/keepalived.js';
import { silentLogger } from '../../../lib/logger.js';

// Starting pair mode (docs/multi-host.md): nonlocal bind set when it can be, and clear refusals
// when it cannot or keepalived is missing.
describe('nonlocal bind in pair mode', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const sysctl = (value: string) => {
    const d = mkdtempSync(join(tmpdir(), 'fulcrum-nonlocal-'));
    dirs.push(d);
    const f = join(d, 'ip_nonlocal_bind');
    writeFileSync(f, value);
    return f;
  };

  it('leaves an already enabled setting alone', () => {
    const f = sysctl('1\n');
    chmodSync(f, 0o444);
    expect(() => ensureNonlocalBind(silentLogger(), f)).not.toThrow();
  });

  it('enables it when it is off', () => {
    const f = sysctl('0\n');
    ensureNonlocalBind(silentLogger(), f);
    expect(readFileSync(f, 'utf8').trim()).toBe('1');
  });

  it('refuses to start, saying what to do, when it cannot be read or set', () => {
    expect(() => ensureNonlocalBind(silentLogger(), '/nonexistent/ip_nonlocal_bind')).toThrow('needs net.ipv4.ip_nonlocal_bind=1');
    // A directory in place of the file: unreadable even for root.
    const d = mkdtempSync(join(tmpdir(), 'fulcrum-nonlocal-'));
    dirs.push(d);
    expect(() => ensureNonlocalBind(silentLogger(), d)).toThrow(/needs net.ipv4.ip_nonlocal_bind=1/);
  });

  it('refuses to start without keepalived, naming the package', async () => {
    const d = mkdtempSync(join(tmpdir(), 'fulcrum-nokeepalived-'));
    dirs.push(d);
    const k = new Keepalived({ iface: 'eth0', peers: ['198.19.1.11'], priority: 100, routerId: 51, name: 'dp', stateDir: d, logger: silentLogger(), serving: () => true, binary: join(d, 'no-such-keepalived') });
    await expect(k.start(['198.18.100.2'])).rejects.toThrow('needs keepalived: install the keepalived package');
    await k.stop();
    // What it would have run is written, private.
    expect(readFileSync(join(d, 'vrrp', 'keepalived.conf'), 'utf8')).toContain('198.18.100.2/32 dev eth0');
  });

  it("stops the keepalived an earlier run left, and nothing else the pid file may name", async () => {
    const d = mkdtempSync(join(tmpdir(), 'fulcrum-leftover-'));
    dirs.push(d);
    mkdirSync(join(d, 'vrrp'));
    const conf = join(d, 'vrrp', 'keepalived.conf');
    // Resolved once exec has happened, so /proc/<pid>/cmdline shows the arguments.
    const idle = async (...extra: string[]) => {
      const p = spawn(process.execPath, ['-e', 'setInterval(() => {}, 1000)', '--', ...extra], { stdio: 'ignore' });
      await new Promise((r) => p.once('spawn', r));
      return p;
    };
    const settings = { iface: 'eth0', peers: [], priority: 100, routerId: 51, name: 'dp', stateDir: d, logger: silentLogger(), serving: () => true, binary: join(d, 'none') };
    const exited = (p: ReturnType<typeof spawn>) => new Promise((r) => (p.exitCode !== null || p.signalCode !== null ? r(null) : p.once('exit', r)));

    // A process that is not this data plane's keepalived: left alone.
    const stranger = await idle('-f', '/elsewhere/keepalived.conf');
    writeFileSync(join(d, 'vrrp', 'keepalived.pid'), `${stranger.pid}\n`);
    await expect(new Keepalived(settings).start([])).rejects.toThrow('needs keepalived');
    expect(stranger.exitCode === null && stranger.signalCode === null).toBe(true);
    stranger.kill('SIGKILL');
    await exited(stranger);

    // One started with this state folder's file: stopped before a new one starts.
    const leftover = await idle('-f', conf);
    writeFileSync(join(d, 'vrrp', 'keepalived.pid'), `${leftover.pid}\n`);
    const gone = exited(leftover);
    await expect(new Keepalived(settings).start([])).rejects.toThrow('needs keepalived');
    await gone;
    expect(leftover.signalCode).toBe('SIGTERM');
  });
});
