// integration-lane: concurrent (two mariadbd of the process runtime in temp roots, on this file's own 127.79.35 block).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { q, withAdmin } from '../../../agent/mysql/admin.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { makeClusterSecrets } from '../../../control-plane/domain/databases/cluster-secrets.js';
import { testNet } from './control-plane-driver.js';

/** Node 1's read_only and binlog position, read as the agent's admin. */
async function nodeState(c: DatabaseController): Promise<{ readOnly: boolean; pos: string }> {
  return withAdmin(await c.adminTarget(1), async (x) => {
    const r = (await q(x, 'SELECT @@read_only AS ro, @@gtid_binlog_pos AS pos'))[0]!;
    return { readOnly: Number(r.ro) === 1, pos: String(r.pos) };
  });
}

/** Rounds until the database has nothing left to do, or `done` holds (each round plans afresh). */
async function tickUntil(c: DatabaseController, done: () => Promise<boolean> = async () => false, max = 40): Promise<void> {
  for (let i = 0; i < max; i++) {
    await c.tick();
    if (await done()) return;
  }
}

/**
 * Why this file exists: in a full-suite run (db-host-rolling), agent ag1 fenced its primary for a
 * planned switchover at 0-1-22, and 5 ms later a round's action made it writable again; a client
 * committed 0-1-23 there (acknowledged by a replica), which the new primary never got. The round
 * had passed its "no operation in flight" check, then yielded in followDesired; the fence took
 * the lock right then, so the round's baseline (`acquired`) already counted the fence, its
 * observation still saw no fence recorded, and its plan ran after the fence as if nothing had
 * happened. Here the same interleaving is forced on a real server (fence during the round's
 * followDesired, released once the round has observed), with an action that writes as root (an
 * allow_list change: sync-accounts). Then the fence's lifetime: a higher term that names the same
 * primary without the control plane abandoning the switchover keeps it fenced; only the explicit
 * abandonment of that fence makes it writable again; a fence whose term another member was named
 * primary for ends (the member becomes a replica, not a primary again).
 */
describe('a planned switchover\'s fence and a reconcile round of the same database', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-fenceorder-'));
  const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  const secrets = makeClusterSecrets(7);
  const net = testNet('127.79', 35);
  /** Holds a fence after it took the database's lock, before it records anything. */
  let hold: Promise<void> | undefined;
  let c!: DatabaseController;

  const desired = (over: Partial<DesiredDatabase__Output> = {}): DesiredDatabase__Output => ({
    id: 7, label: 'fenceorder', engineId: '', version: '', image: '', binary: '',
    type: { id: 'g6-nanode-1', memoryMb: 512, vcpus: 1, diskMb: 0 },
    clusterSize: 3, replicationType: 'asynch', sslConnection: true, encrypted: false, allowList: [],
    updates: { frequency: 'weekly', duration: 3, hourOfDay: 0, dayOfWeek: 0, weekOfMonth: 0 },
    rootPassword: 'Fence-order-pw-1', state: 'running', hostPrimary: `${net}.200`, hostSecondary: `${net}.201`, port: 3306, generation: 1,
    restartOptions: {}, dynamicOptions: {}, proxySources: [], term: 4, primaryMember: 1, primaryPosition: '',
    members: [
      { index: 1, agentId: 'a', local: true, address: '', serverId: 1 },
      { index: 2, agentId: 'b', local: false, address: `${net}.210:3306`, serverId: 2 },
      { index: 3, agentId: 'c', local: false, address: `${net}.211:3306`, serverId: 3 },
    ],
    clusterCaPem: secrets.caCertPem, clusterCaKeyPem: secrets.caKeyPem, replicationPassword: secrets.replPassword,
    ...over,
  }) as unknown as DesiredDatabase__Output;

  const node = () => nodeState(c);
  const rounds = (done?: () => Promise<boolean>, max?: number) => tickUntil(c, done, max);

  beforeAll(async () => {
    const [engine] = await detectLocalCatalogue();
    if (!engine) throw new Error('no local mariadbd found: this test needs mariadb-server installed');
    c = new DatabaseController({
      id: 7, agentId: 'a', agentKey: 'f0e0de', stateDir: join(root, 'state'), runtime: rt, runtimeKind: 'process', catalogue: [engine],
      logger: silentLogger(), clock: systemClock, nodeAddressPool: `${net}.0/29`, takenAddresses: () => new Set(), onChange: () => undefined,
      extras: {
        windowOpen: () => false, extraReport: () => ({}),
        beforeAction: async (_c, label) => {
          if (label === 'switchover' && hold) await hold;
        },
      },
    });
    c.setDesired(desired({ engineId: engine.id }));
    // Provisioned as its agent does it: the member named primary made writable, linroot written.
    await rounds(async () => !!c.state?.provisioned && !(await node()).readOnly);
    expect(c.state?.provisioned).toBe(true);
  }, 180_000);

  afterAll(async () => {
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  }, 120_000);

  it('runs no action planned before the fence after it: nothing is written past the fenced position', async () => {
    const engineId = c.desired!.engineId;
    // A client's write: the fence answers a position at or past it.
    await withAdmin(await c.adminTarget(1), (x) => x.query('CREATE DATABASE fenceorder'));
    // An allow_list change arrives with the switchover: the round would sync linroot's accounts.
    c.setDesired(desired({ engineId, allowList: ['203.0.113.0/24'] }));
    let release!: () => void;
    hold = new Promise<void>((r) => (release = r));
    let fencing: Promise<string> | undefined;
    const followDesired = c.followDesired.bind(c);
    const observe = c.observe.bind(c);
    let forced = false;
    Object.assign(c, {
      // The round's own followDesired yields; the fence takes the lock right then.
      followDesired: async () => {
        if (!fencing) {
          fencing = c.fence(4, 1);
          const until = Date.now() + 30_000;
          while (c.busy !== 'switchover' && Date.now() < until) await new Promise((r) => setImmediate(r));
        }
        return followDesired();
      },
      // The round observed before the fence was recorded; the fence then ends before it acts.
      observe: async () => {
        const o = await observe();
        if (fencing && !forced) {
          forced = true;
          release();
          await fencing;
        }
        return o;
      },
    });
    try {
      await c.tick();
    } finally {
      release();
      Object.assign(c, { followDesired, observe });
      hold = undefined;
    }
    const position = await fencing!;
    expect(position).toMatch(/^0-1-\d+$/);
    expect(await node()).toEqual({ readOnly: true, pos: position });
    // Later rounds plan on fresh observations: a fenced primary is neither promoted nor written.
    await rounds(async () => false, 5);
    expect(await node()).toEqual({ readOnly: true, pos: position });
    expect(c.report().nodes?.find((n) => n.member === 1)?.role).toBe('fenced');
    // Nor by a credentials reset (an operation of its own, which writes linroot as root).
    await expect(c.resetCredentials('Fence-order-pw-2')).rejects.toThrow(/fenced/);
    expect(await node()).toEqual({ readOnly: true, pos: position });
  }, 120_000);

  it('keeps the fence over a higher term naming the same primary until the control plane abandons that fence', async () => {
    const engineId = c.desired!.engineId;
    const position = (await node()).pos;
    // A higher term naming the same primary that is not the abandonment of this fence.
    c.setDesired(desired({ engineId, allowList: ['203.0.113.0/24'], term: 6 }));
    await rounds(async () => false, 5);
    expect(c.state?.term).toBe(6);
    expect(await node()).toEqual({ readOnly: true, pos: position });
    // The abandonment of another fence (term 5's, which this agent never made) changes nothing.
    c.setDesired(desired({ engineId, allowList: ['203.0.113.0/24'], term: 7, fenceLiftedTerm: 5 } as Partial<DesiredDatabase__Output>));
    await rounds(async () => false, 5);
    expect(await node()).toEqual({ readOnly: true, pos: position });
    // The control plane abandons the switchover of term 4: its member serves again, accounts synced.
    c.setDesired(desired({ engineId, allowList: ['203.0.113.0/24'], term: 8, fenceLiftedTerm: 4 } as Partial<DesiredDatabase__Output>));
    await rounds(async () => !(await node()).readOnly && c.report().nodes?.find((n) => n.member === 1)?.role === 'primary');
    expect(c.state?.fencedTerm).toBeUndefined();
    expect((await node()).readOnly).toBe(false);
  }, 120_000);
});

/**
 * A 1-node database fenced to move off a draining host (docs/multi-host.md, "The move's fence"),
 * on a real server: a higher term alone, or the abandonment of another fence, leaves it
 * read-only at the fenced position; only the control plane's word that this very move was
 * abandoned (fence_lifted_term = the fence's term) makes it writable again. Its own mariadbd in
 * this file's 127.79.35 block (pool .8/29), its own temp root.
 */
describe('a 1-node database fenced to move, on a real server', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-movefence-'));
  const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  const net = testNet('127.79', 35);
  let c!: DatabaseController;

  const desired = (over: Partial<DesiredDatabase__Output> = {}): DesiredDatabase__Output => ({
    id: 8, label: 'movefence', engineId: '', version: '', image: '', binary: '',
    type: { id: 'g6-nanode-1', memoryMb: 512, vcpus: 1, diskMb: 0 },
    clusterSize: 1, replicationType: 'none', sslConnection: true, encrypted: false, allowList: [],
    updates: { frequency: 'weekly', duration: 3, hourOfDay: 0, dayOfWeek: 0, weekOfMonth: 0 },
    rootPassword: 'Move-fence-pw-1', state: 'running', hostPrimary: `${net}.202`, hostSecondary: `${net}.203`, port: 3306, generation: 1,
    restartOptions: {}, dynamicOptions: {}, proxySources: [], term: 2, primaryMember: 0, primaryPosition: '', fenceLiftedTerm: 0,
    members: [{ index: 1, agentId: 'a', local: true, address: '', serverId: 1 }],
    ...over,
  }) as unknown as DesiredDatabase__Output;
  const node = () => nodeState(c);
  const rounds = (done?: () => Promise<boolean>, max?: number) => tickUntil(c, done, max);

  beforeAll(async () => {
    const [engine] = await detectLocalCatalogue();
    if (!engine) throw new Error('no local mariadbd found: this test needs mariadb-server installed');
    c = new DatabaseController({
      id: 8, agentId: 'a', agentKey: 'f0e0df', stateDir: join(root, 'state'), runtime: rt, runtimeKind: 'process', catalogue: [engine],
      logger: silentLogger(), clock: systemClock, nodeAddressPool: `${net}.8/29`, takenAddresses: () => new Set(), onChange: () => undefined,
      extras: { windowOpen: () => false, extraReport: () => ({}) },
    });
    c.setDesired(desired({ engineId: engine.id }));
    await rounds(async () => !!c.state?.provisioned && !(await node()).readOnly);
    expect(c.state?.provisioned).toBe(true);
  }, 180_000);

  afterAll(async () => {
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  }, 120_000);

  it('stays read-only over a higher term and over another fence\'s abandonment; serves again on the abandonment of its own move', async () => {
    const engineId = c.desired!.engineId;
    await withAdmin(await c.adminTarget(1), (x) => x.query('CREATE DATABASE movefence'));
    const position = await c.fence(2, 1);
    expect(position).toMatch(/^0-1-\d+$/);
    expect(await node()).toEqual({ readOnly: true, pos: position });
    // A higher term without the word (a term raised for any other reason).
    c.setDesired(desired({ engineId, term: 3 }));
    await rounds(async () => false, 5);
    expect([c.state?.fencedTerm, await node()]).toEqual([2, { readOnly: true, pos: position }]);
    // The word names another fence (term 1's, which this agent never made).
    c.setDesired(desired({ engineId, term: 4, fenceLiftedTerm: 1 } as Partial<DesiredDatabase__Output>));
    await rounds(async () => false, 5);
    expect([c.state?.fencedTerm, await node()]).toEqual([2, { readOnly: true, pos: position }]);
    // The control plane abandons the move of term 2: the node serves writes again where it was.
    c.setDesired(desired({ engineId, term: 5, fenceLiftedTerm: 2 } as Partial<DesiredDatabase__Output>));
    await rounds(async () => !(await node()).readOnly);
    expect(c.state?.fencedTerm).toBeUndefined();
    expect((await node()).readOnly).toBe(false);
  }, 120_000);
});
