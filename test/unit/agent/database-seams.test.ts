import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { DiskUsage } from '../../../agent/database/disk-usage.js';
import { Observer, type InspectContext } from '../../../agent/database/observe.js';
import { remove } from '../../../agent/database/remove.js';
import { newDbState } from '../../../agent/database/state.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true })));
const tempDir = () => {
  const d = mkdtempSync(join(tmpdir(), 'fulcrum-db-seams-'));
  dirs.push(d);
  return d;
};
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
};

describe('DiskUsage', () => {
  it('measures at most every 30 s of the injected clock and reports low disk once', async () => {
    const dir = tempDir();
    writeFileSync(join(dir, 'ibdata1'), Buffer.alloc(3 * 1024 * 1024));
    const clock = new ManualClock(1_000_000);
    const low: string[] = [];
    const disk = new DiskUsage(clock, silentLogger(), (m) => low.push(m));
    disk.measureIfDue(dir, 3);
    await until(() => disk.mb === 3);
    expect(low).toEqual(['3 MiB of 3 MiB used']);
    writeFileSync(join(dir, 'ibdata2'), Buffer.alloc(2 * 1024 * 1024));
    clock.advance(30_000);
    disk.measureIfDue(dir, 3);
    await new Promise((r) => setTimeout(r, 50));
    expect(disk.mb).toBe(3);
    clock.advance(1);
    disk.measureIfDue(dir, 3);
    await until(() => disk.mb === 5);
    expect(low).toHaveLength(1);
  });
});

describe('Observer', () => {
  it('counts observations of an unusable primary per primary: a new primary starts from zero', async () => {
    const state = { ...newDbState(1), provisioned: true, addresses: ['127.79.0.1', '127.79.0.2'] };
    const runtime = { inspect: async () => ({ state: 'stopped' }) } as unknown as ContainerRuntime;
    const db: InspectContext = {
      runtime,
      nodeIndexes: () => [1, 2],
      nodeName: (k) => `n${k}`,
      nodeSpec: () => { throw new Error('not needed'); },
      adminTarget: async () => ({ socketPath: '', password: '' }),
      primaryAddress: () => state.addresses[state.primary - 1]!,
      log: silentLogger(),
    };
    const desired = { allowList: [], rootPassword: 'x', generation: 4, hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', port: 3306 } as unknown as DesiredDatabase__Output;
    const input = {
      state, desired, linrootPassword: 'x', patchRequested: false, windowOpen: () => false,
      resolveEngine: () => state.running, proxyNetworks: 'localhost,127.76.0.1',
    };
    const o = new Observer();
    expect((await o.observe(db, input)).primaryDownCount).toBe(1);
    expect((await o.observe(db, input)).primaryDownCount).toBe(2);
    state.primary = 2;
    expect((await o.observe(db, input)).primaryDownCount).toBe(1);
    expect(o.generation).toBe(4);
    // No member answers, so none has a proxy_protocol_networks to correct.
    expect(o.last?.proxiesCurrent).toBe(true);
  });
});

describe('remove', () => {
  it('needs only its narrow context: closes endpoints, removes every labelled node, the folder and backups', async () => {
    const root = tempDir();
    const removed: string[] = [];
    let closed = 0;
    const runtime = {
      list: async () => [{ name: 'n9' }],
      remove: async (name: string) => void removed.push(name),
    } as unknown as ContainerRuntime;
    mkdirSync(join(root, 'db', 'tls'), { recursive: true });
    mkdirSync(join(root, 'backups', '1'), { recursive: true });
    await remove({
      id: 7, agentId: 'a', dir: join(root, 'db'), backupsDir: join(root, 'backups'), runtime,
      nodeIndexes: () => [1, 2], nodeName: (k) => `n${k}`, closeEndpoints: async () => void closed++, settleSaves: async () => undefined,
    });
    expect(closed).toBe(1);
    expect(removed.sort()).toEqual(['n1', 'n2', 'n9']);
    expect(existsSync(join(root, 'db'))).toBe(false);
    expect(existsSync(join(root, 'backups'))).toBe(false);
  });

  it('keepBackups: the backups folder is left to the store\'s purge (a fork may read it)', async () => {
    const root = tempDir();
    const runtime = { list: async () => [], remove: async () => undefined } as unknown as ContainerRuntime;
    mkdirSync(join(root, 'db'), { recursive: true });
    mkdirSync(join(root, 'backups', '1'), { recursive: true });
    await remove({
      id: 7, agentId: 'a', dir: join(root, 'db'), backupsDir: join(root, 'backups'), runtime,
      nodeIndexes: () => [1], nodeName: (k) => `n${k}`, closeEndpoints: async () => undefined, settleSaves: async () => undefined,
    }, { keepBackups: true });
    expect(existsSync(join(root, 'db'))).toBe(false);
    expect(existsSync(join(root, 'backups', '1'))).toBe(true);
  });
});
