// integration-lane: concurrent (up to three mariadbd of the process runtime at a time, in temp roots, on this file's own 127.79.35 block).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../lib/clock.js';
import { gtidContains } from '../../../lib/gtid.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { detectLocalCatalogue, type CatalogueEntry } from '../../../agent/catalogue.js';
import { DatabaseController, type ControllerExtras } from '../../../agent/database/controller.js';
import { globalStatus, q, withAdmin } from '../../../agent/mysql/admin.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
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

const AGENTS = ['a', 'b', 'c'] as const;
type AgentId = (typeof AGENTS)[number];

/** Rounds of one agent's controller until `done` holds; throws when it never does. */
async function roundsUntil(c: DatabaseController, done: () => Promise<boolean>, what: string, max = 200): Promise<void> {
  for (let i = 0; i < max; i++) {
    await c.tick();
    if (await done().catch(() => false)) return;
    await systemClock.sleep(100);
  }
  throw new Error(`never got there: ${what}`);
}

/**
 * A member of a semi_synch cluster spread over agents that is being seeded acknowledges no write
 * until it has caught up (docs/multi-host.md, "Failover candidates"; agent/database/seed-ack.ts).
 * Three real agents' controllers (a: member 1, the primary; b: member 2; c: member 3), each with
 * its own process runtime and state folder, replicating over TLS between real mariadbd servers.
 * Member 3 is seeded with its SQL thread held an hour behind (MASTER_DELAY, set by the test's
 * stand-in for the store's physical base, which this agent has not): its IO thread receives the
 * primary's writes while it applies none, the case where its acknowledgement alone would let a
 * write commit that the promoted member 2 could lack. Its desired state carries the control
 * plane's seeding mark (DesiredMember.seeding) until the test clears it: a member that has caught
 * up still acknowledges nothing while the control plane would not promote it. Addresses: this
 * file's 127.79.35 block (pools .96/29, .104/29, .112/29; endpoints .220-.221).
 */
describe('a member being seeded acknowledges no semi-sync write (three agents, real MariaDB)', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-seedack-'));
  const net = testNet('127.79', 35);
  const pools: Record<AgentId, string> = { a: `${net}.96/29`, b: `${net}.104/29`, c: `${net}.112/29` };
  const rts = Object.fromEntries(AGENTS.map((id) => [id, createProcessRuntime({ root: join(root, id, 'runtime'), logger: silentLogger() })])) as Record<AgentId, ContainerRuntime>;
  const secrets = makeClusterSecrets(9);
  const ctl = {} as Record<AgentId, DatabaseController>;
  let engine!: CatalogueEntry;
  /** Member 1's address once its agent has allocated it. */
  let primaryAddress = '';
  /** Members the control plane's seeding mark is on (DesiredMember.seeding). */
  const marked = new Set<number>();

  const desired = (agent: AgentId): DesiredDatabase__Output => ({
    id: 9, label: 'seedack', engineId: engine.id, version: '', image: '', binary: '',
    type: { id: 'g6-nanode-1', memoryMb: 512, vcpus: 1, diskMb: 0 },
    clusterSize: 3, replicationType: 'semi_synch', sslConnection: true, encrypted: false, allowList: [],
    updates: { frequency: 'weekly', duration: 3, hourOfDay: 0, dayOfWeek: 0, weekOfMonth: 0 },
    rootPassword: 'Seed-ack-pw-1', state: 'running', hostPrimary: `${net}.220`, hostSecondary: `${net}.221`, port: 3306, generation: 1,
    restartOptions: {}, dynamicOptions: {}, proxySources: [], term: 2, primaryMember: 1, primaryPosition: '', fenceLiftedTerm: 0,
    members: AGENTS.map((id, i) => ({ index: i + 1, agentId: id, local: id === agent, address: i === 0 && agent !== 'a' ? `${primaryAddress}:3306` : '', serverId: i + 1, seeding: marked.has(i + 1) })),
    clusterCaPem: secrets.caCertPem, clusterCaKeyPem: secrets.caKeyPem, replicationPassword: secrets.replPassword,
  }) as unknown as DesiredDatabase__Output;

  const controller = (agent: AgentId, extras: Partial<ControllerExtras> = {}): DatabaseController => {
    const c = new DatabaseController({
      id: 9, agentId: agent, agentKey: `5eedac${AGENTS.indexOf(agent)}`, stateDir: join(root, agent, 'state'), runtime: rts[agent], runtimeKind: 'process',
      catalogue: [engine], logger: silentLogger(), clock: systemClock, nodeAddressPool: pools[agent], takenAddresses: () => new Set(), onChange: () => undefined,
      extras: { windowOpen: () => false, extraReport: () => ({}), ...extras },
    });
    c.setDesired(desired(agent));
    return c;
  };
  const sql = async (agent: AgentId, k: number, text: string) => withAdmin(await ctl[agent].adminTarget(k), (x) => q(x, text));
  const acking = async (k: number) => Number((await sql(AGENTS[k - 1]!, k, 'SELECT @@rpl_semi_sync_slave_enabled AS v'))[0]!.v);
  const clients = async () => Number(await withAdmin(await ctl.a.adminTarget(1), (x) => globalStatus(x, 'Rpl_semi_sync_master_clients')));
  const replica = async (k: number) => (await sql(AGENTS[k - 1]!, k, 'SHOW SLAVE STATUS'))[0] as Record<string, unknown> | undefined;
  const replicating = async (k: number) => {
    const r = await replica(k);
    return r?.Slave_IO_Running === 'Yes' && r.Slave_SQL_Running === 'Yes';
  };
  const rows = async (k: number) => Number((await sql(AGENTS[k - 1]!, k, 'SELECT COUNT(*) AS n FROM seedack.t'))[0]!.n);
  /** The test's stand-in for the store's base: the member's SQL thread an hour behind (kept by the agent's CHANGE MASTER). */
  const holdBehind: Partial<ControllerExtras> = {
    seedMember: async (c, k) => {
      await withAdmin(await c.adminTarget(k), (x) => x.query('CHANGE MASTER TO MASTER_DELAY=3600'));
      return { skipped: 'the test holds the member an hour behind' };
    },
  };

  beforeAll(async () => {
    const [found] = await detectLocalCatalogue();
    if (!found) throw new Error('no local mariadbd found: this test needs mariadb-server installed');
    engine = found;
    ctl.a = controller('a');
    await roundsUntil(ctl.a, async () => !!ctl.a.state?.provisioned
      && Number((await sql('a', 1, 'SELECT @@read_only AS ro, @@rpl_semi_sync_master_enabled AS ss'))[0]!.ss) === 1, 'member 1 a semi-sync primary');
    primaryAddress = ctl.a.state!.addresses[0]!;
    // Member 2, a new cluster's replica: seeded too (it has applied nothing), then acknowledging.
    ctl.b = controller('b');
    await roundsUntil(ctl.b, async () => await replicating(2) && await acking(2) === 1 && await clients() === 1, 'member 2 acknowledging');
    expect(ctl.b.state?.seeding).toBeUndefined();
    await sql('a', 1, 'CREATE DATABASE seedack');
    await sql('a', 1, 'CREATE TABLE seedack.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))');
    await sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('before the seeding')");
  }, 240_000);

  afterAll(async () => {
    for (const rt of Object.values(rts)) for (const n of await rt.list({})) await rt.remove(n.name, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  }, 120_000);

  it('keeps a seeding member silent over an agent and a node restart, and while the control plane still marks it, and counts it once it has caught up and the mark is cleared', async () => {
    // Placed by the control plane with its seeding mark, as a re-placed member is.
    marked.add(3);
    ctl.c = controller('c', holdBehind);
    await roundsUntil(ctl.c, async () => !!ctl.c.state?.seeding?.length && await replicating(3), 'member 3 replicating while seeded');
    expect(ctl.c.state!.seeding).toEqual([{ node: 3, until: expect.stringMatching(/^0-1-\d+$/) }]);
    expect(Number((await replica(3))!.SQL_Delay)).toBe(3600);
    // It receives, applies nothing, acknowledges nothing; member 2 acknowledges the primary's writes.
    const silent = async () => {
      expect(await acking(3)).toBe(0);
      expect(await clients()).toBe(1);
    };
    await silent();
    await sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('while it is seeded')");
    const written = String((await sql('a', 1, 'SELECT @@gtid_binlog_pos AS p'))[0]!.p);
    await roundsUntil(ctl.c, async () => String((await replica(3))!.Gtid_IO_Pos) === written, 'member 3 received the write');
    await silent();
    expect(Number((await sql('c', 3, 'SELECT @@gtid_current_pos AS p'))[0]!.p || 0)).toBe(0);

    // The agent restarts: its saved state keeps the member silent.
    ctl.c = controller('c', holdBehind);
    for (let i = 0; i < 5; i++) await ctl.c.tick();
    expect(ctl.c.state!.seeding).toHaveLength(1);
    await silent();
    // The node restarts: its config file says ON; the agent sets it OFF before the IO thread starts.
    await rts.c.stop(ctl.c.nodeName(3));
    await roundsUntil(ctl.c, async () => await replicating(3), 'member 3 replicating after its restart');
    await silent();

    // Member 2 gone: a write waits for an acknowledgement the seeding member does not send.
    await rts.b.stop(ctl.b.nodeName(2));
    await roundsUntil(ctl.c, async () => await clients() === 0, 'member 2 disconnected');
    let committed = false;
    const write = sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('no acknowledging replica')").then(() => (committed = true));
    await roundsUntil(ctl.c, async () => Number(await withAdmin(await ctl.a.adminTarget(1), (x) => globalStatus(x, 'Rpl_semi_sync_master_wait_sessions'))) >= 1, 'the write waiting');
    expect(committed).toBe(false);

    // The member catches up (its SQL thread no longer held back), but the control plane's mark is
    // still on it (it has not seen the member's report yet): the member stays silent, the write waits.
    await sql('c', 3, 'STOP SLAVE');
    await sql('c', 3, 'CHANGE MASTER TO MASTER_DELAY=0');
    await sql('c', 3, 'START SLAVE');
    // Caught up: replicating, and holding the position its entry waits for (a round that saw the
    // IO thread reconnecting may have seeded it again, with a newer one).
    const caughtUp = async () => {
      const e = ctl.c.state?.seeding?.find((x) => x.node === 3);
      return !!e && gtidContains(String((await sql('c', 3, 'SELECT @@gtid_current_pos AS p'))[0]!.p), e.until) && await replicating(3);
    };
    await roundsUntil(ctl.c, caughtUp, 'member 3 caught up');
    for (let i = 0; i < 10; i++) {
      await ctl.c.tick();
      await systemClock.sleep(100);
    }
    expect(ctl.c.state!.seeding).toEqual([{ node: 3, until: expect.stringMatching(/^0-1-\d+$/) }]);
    expect(await caughtUp()).toBe(true);
    expect(await acking(3)).toBe(0);
    expect(await clients()).toBe(0);
    expect(committed).toBe(false);
    // The control plane clears its mark: the member turns acknowledging, the write commits.
    marked.delete(3);
    ctl.c.setDesired(desired('c'));
    await roundsUntil(ctl.c, async () => ctl.c.state?.seeding === undefined && await acking(3) === 1 && await clients() === 1, 'member 3 acknowledging');
    // MariaDB does not count the member's reconnection as acknowledging what it had received before
    // (the waiting write): the acknowledgement of the next write releases both.
    await sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('the next write')");
    await write;
    expect(committed).toBe(true);
    // Acknowledged means received (in its relay log), not applied yet: waited for.
    await roundsUntil(ctl.c, async () => await rows(3) === 4, 'member 3 applied the four rows');
    expect(await rows(3)).toBe(4);
    // Member 2 back: both replicas acknowledge.
    await roundsUntil(ctl.b, async () => await replicating(2) && await clients() === 2, 'member 2 back');
    expect([await acking(2), await acking(3)]).toEqual([1, 1]);

    // Marked seeding while it acknowledges with no entry of its own (what an agent that did not
    // read the mark leaves behind): silenced, and on again once unmarked.
    marked.add(3);
    ctl.c.setDesired(desired('c'));
    await roundsUntil(ctl.c, async () => !!ctl.c.state?.seeding?.length && await acking(3) === 0 && await clients() === 1, 'member 3 silenced by the mark');
    marked.delete(3);
    ctl.c.setDesired(desired('c'));
    await roundsUntil(ctl.c, async () => ctl.c.state?.seeding === undefined && await acking(3) === 1 && await clients() === 2, 'member 3 acknowledging again');
  }, 300_000);
});
