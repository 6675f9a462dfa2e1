import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { openSqliteStore } from '../../../control-plane/store/sqlite/store.js';
import type { Store } from '../../../control-plane/domain/store.js';
import type { NewConfig } from '../../../control-plane/domain/nodebalancers/model.js';
import { runFulcrum, until } from '../../helpers/lab.js';

/**
 * `fulcrum kek rotate` beside a control plane that writes (docs/security/secrets.md, "Rotation"):
 * two processes, one SQLite store. Whichever of them meets the other's write transaction waits
 * for it (busy timeout) instead of failing at once with `database is locked`, which a transaction
 * that reads before it writes does when it began as a plain (deferred) BEGIN.
 */
const betterSqlite = createRequire(import.meta.url).resolve('better-sqlite3');

/**
 * Another process that holds the store's write lock until `release` is called or, with
 * `releaseAfterMs`, until that much time has passed (for a caller that blocks this process).
 */
async function holdWriteLock(path: string, releaseAfterMs = 0): Promise<{ release: () => Promise<void> }> {
  const script = `
    const db = new (require(process.argv[1]))(process.argv[2]);
    db.pragma('busy_timeout = 5000');
    db.exec('BEGIN IMMEDIATE');
    const done = () => { db.exec('COMMIT'); db.close(); process.exit(0); };
    process.stdout.write('locked\\n');
    if (Number(process.argv[3]) > 0) setTimeout(done, Number(process.argv[3]));
    process.stdin.once('data', done);`;
  const p = spawn(process.execPath, ['-e', script, betterSqlite, path, String(releaseAfterMs)], { stdio: ['pipe', 'pipe', 'inherit'] });
  const exited = new Promise<number | null>((r) => p.once('exit', r));
  await new Promise<void>((resolve, reject) => {
    p.stdout!.on('data', (d) => String(d).includes('locked') && resolve());
    void exited.then((code) => reject(new Error(`lock holder exited (${code}) before it held the lock`)));
  });
  return {
    release: async () => {
      // One that lets go by itself may have exited before this process saw it (it was blocked).
      if (releaseAfterMs === 0) p.stdin!.write('go\n');
      expect(await exited).toBe(0);
    },
  };
}

/**
 * Another process that, holding the store's write lock, does to the key file what a rotation
 * does while a control plane waits for the lock: adds a key (after 300 ms), then drops the old
 * one (after 600 ms), then commits. `done` resolves when it has exited.
 */
async function swapKeysUnderLock(path: string, kekFile: string): Promise<{ done: Promise<number | null> }> {
  const script = `
    const fs = require('fs'), crypto = require('crypto');
    const [mod, dbPath, file] = process.argv.slice(1);
    const db = new (require(mod))(dbPath);
    db.pragma('busy_timeout = 5000');
    db.exec('BEGIN IMMEDIATE');
    const write = (lines) => { fs.writeFileSync(file + '.tmp', lines.join('\\n') + '\\n', { mode: 0o600 }); fs.renameSync(file + '.tmp', file); };
    const old = fs.readFileSync(file, 'utf8').split('\\n').filter((l) => l && !l.startsWith('#'));
    const next = crypto.randomBytes(6).toString('hex') + ' ' + crypto.randomBytes(32).toString('base64');
    process.stdout.write('locked\\n');
    setTimeout(() => write([...old, next]), 300);
    setTimeout(() => { write([next]); db.exec('COMMIT'); db.close(); process.exit(0); }, 600);`;
  const p = spawn(process.execPath, ['-e', script, betterSqlite, path, kekFile], { stdio: ['ignore', 'pipe', 'inherit'] });
  const done = new Promise<number | null>((r) => p.once('exit', r));
  await new Promise<void>((resolve, reject) => {
    p.stdout!.on('data', (d) => String(d).includes('locked') && resolve());
    void done.then((code) => reject(new Error(`key swapper exited (${code}) before it held the lock`)));
  });
  return { done };
}

const keysIn = (file: string) => readFileSync(file, 'utf8').split('\n').filter((l) => l && !l.startsWith('#'));

describe('kek rotate beside a writing control plane', () => {
  const dir = mkdtempSync(join(tmpdir(), 'flake-secrets-kek-'));
  const path = join(dir, 'control-plane.sqlite');
  const kek = join(dir, 'keys', 'kek');
  let store: Store;

  beforeAll(async () => {
    store = openSqliteStore(path);
    const nb = await store.nodebalancers.create({
      label: 'kek-nb', region: 'us-east', ipv4: '0.0.0.0', ipv6: null, clientConnThrottle: 0, clientUdpSessThrottle: 0,
      type: 'common', tags: [], created: 1000, updated: 1000,
    });
    await store.nodebalancers.createConfig(nb.id, {
      port: 443, protocol: 'https', algorithm: 'roundrobin', stickiness: 'none', check: 'none', checkInterval: 5, checkTimeout: 3,
      checkAttempts: 2, checkPath: '', checkBody: '', checkPassive: true, proxyProtocol: 'none', cipherSuite: 'recommended',
      sslCert: 'CERT', sslKey: 'PRIVATE KEY BYTES', sslCommonname: '', sslFingerprint: '', udpCheckPort: 80, udpSessionTimeout: 16,
    } as NewConfig);
  });
  afterAll(async () => {
    await store?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  it('the rotation waits for a control plane write in progress and then re-seals', async () => {
    const lock = await holdWriteLock(path);
    const cli = runFulcrum(['kek', 'rotate', '--state', dir]);
    let out = '';
    cli.stdout!.on('data', (d) => (out += d));
    cli.stderr!.on('data', (d) => (out += d));
    const exited = new Promise<number | null>((r) => cli.once('exit', r));
    // The rotation has added its key (so it is about to write the store) while the lock is held.
    let code: number | null | undefined;
    void exited.then((c) => (code = c));
    await until('new key added', () => keysIn(kek).length === 2 || code !== undefined, 60_000, 20);
    await new Promise((r) => setTimeout(r, 300));
    await lock.release();
    expect(await exited, out).toBe(0);
    const active = keysIn(kek);
    expect(active).toHaveLength(1);
    expect(out).toContain(`key ${active[0]!.split(' ')[0]}`);
    const nbs = await store.nodebalancers.list();
    expect((await store.nodebalancers.configs(nbs[0]!.id))[0]!.sslKey).toBe('PRIVATE KEY BYTES');
  });

  it('a control plane write that reads first waits for the rotation (another process) to commit', async () => {
    const user = await store.users.create({ username: 'kek-user', email: 'k@x', restricted: false, grants: { global: {}, nodebalancer: {}, database: {} } });
    // tokens.create reads the id sequence, then inserts. The holder commits by itself after
    // 700 ms, well inside the busy timeout: this process is blocked in the wait meanwhile.
    const lock = await holdWriteLock(path, 700);
    const t = await store.tokens.create({ userId: user.id, label: 'k', scopes: '*', tokenHash: 'kek-h', tokenPrefix: 'p', created: 1, expiry: null });
    await lock.release();
    expect((await store.tokens.get(t.id))?.label).toBe('k');
  });

  it('a secret written while a rotation swaps the key is sealed with the key that stays', async () => {
    const nb = (await store.nodebalancers.list())[0]!;
    const config = (await store.nodebalancers.configs(nb.id))[0]!;
    const swap = await swapKeysUnderLock(path, kek);
    // Blocks this process until the swapper commits; the new TLS key is sealed on the way.
    await store.nodebalancers.updateConfig(config.id, { ...config, sslKey: 'ROTATED KEY BYTES' });
    expect(await swap.done).toBe(0);
    // A restart reads the key file alone (the old key is gone from it): the value still opens.
    await store.close();
    store = openSqliteStore(path);
    expect((await store.nodebalancers.configs(nb.id))[0]!.sslKey).toBe('ROTATED KEY BYTES');
  });
});
