import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ensureNonlocalBind } from '../../../dataplane/vrrp/keepalived.js';
import { silentLogger } from '../../../lib/logger.js';

// Pair mode's nonlocal bind (docs/multi-host.md): set when it can be, a clear refusal when not.
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
});
