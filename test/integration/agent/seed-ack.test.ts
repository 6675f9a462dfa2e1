import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { detectLocalCatalogue, type CatalogueEntry } from '../../../agent/catalogue.js';
import { DatabaseController, type ControllerExtras } from '../../../agent/database/controller.js';
import { globalStatus, q, withAdmin } from '../../../agent/mysql/admin.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { makeClusterSecrets } from '../../../control-plane/domain/databases/cluster-secrets.js';
import { testNet } from './control-plane-driver.js';

const AGENTS = ['a', 'b', 'c'] as const;
type AgentId = (typeof AGENTS)[number];

/** Rounds of one agent's controller until `done` holds; throws when it never does. */
async function tickUntil(c: DatabaseController, done: () => Promise<boolean>, what: string, max = 200): Promise<void> {
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
 * write commit that the promoted member 2 could lack. Addresses: fence-order.test.ts's
 * 127.79.35 block, in a part that file does not use (pools .96/29, .104/29, .112/29; endpoints
 * .220-.221).
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

  const desired = (agent: AgentId): DesiredDatabase__Output => ({
    id: 9, label: 'seedack', engineId: engine.id, version: '', image: '', binary: '',
    type: { id: 'g6-nanode-1', memoryMb: 512, vcpus: 1, diskMb: 0 },
    clusterSize: 3, replicationType: 'semi_synch', sslConnection: true, encrypted: false, allowList: [],
    updates: { frequency: 'weekly', duration: 3, hourOfDay: 0, dayOfWeek: 0, weekOfMonth: 0 },
    rootPassword: 'Seed-ack-pw-1', state: 'running', hostPrimary: `${net}.220`, hostSecondary: `${net}.221`, port: 3306, generation: 1,
    restartOptions: {}, dynamicOptions: {}, proxySources: [], term: 2, primaryMember: 1, primaryPosition: '', fenceLiftedTerm: 0,
    members: AGENTS.map((id, i) => ({ index: i + 1, agentId: id, local: id === agent, address: i === 0 && agent !== 'a' ? `${primaryAddress}:3306` : '', serverId: i + 1 })),
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
    await tickUntil(ctl.a, async () => !!ctl.a.state?.provisioned
      && Number((await sql('a', 1, 'SELECT @@read_only AS ro, @@rpl_semi_sync_master_enabled AS ss'))[0]!.ss) === 1, 'member 1 a semi-sync primary');
    primaryAddress = ctl.a.state!.addresses[0]!;
    // Member 2, a new cluster's replica: seeded too (it has applied nothing), then acknowledging.
    ctl.b = controller('b');
    await tickUntil(ctl.b, async () => await replicating(2) && await acking(2) === 1 && await clients() === 1, 'member 2 acknowledging');
    expect(ctl.b.state?.seeding).toBeUndefined();
    await sql('a', 1, 'CREATE DATABASE seedack');
    await sql('a', 1, 'CREATE TABLE seedack.t (id INT AUTO_INCREMENT PRIMARY KEY, v VARCHAR(40))');
    await sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('before the seeding')");
  }, 240_000);

  afterAll(async () => {
    for (const rt of Object.values(rts)) for (const n of await rt.list({})) await rt.remove(n.name, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  }, 120_000);

  it('keeps a seeding member silent over an agent and a node restart, and counts it once it has caught up', async () => {
    ctl.c = controller('c', holdBehind);
    await tickUntil(ctl.c, async () => !!ctl.c.state?.seeding?.length && await replicating(3), 'member 3 replicating while seeded');
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
    await tickUntil(ctl.c, async () => String((await replica(3))!.Gtid_IO_Pos) === written, 'member 3 received the write');
    await silent();
    expect(Number((await sql('c', 3, 'SELECT @@gtid_current_pos AS p'))[0]!.p || 0)).toBe(0);

    // The agent restarts: its saved state keeps the member silent.
    ctl.c = controller('c', holdBehind);
    for (let i = 0; i < 5; i++) await ctl.c.tick();
    expect(ctl.c.state!.seeding).toHaveLength(1);
    await silent();
    // The node restarts: its config file says ON; the agent sets it OFF before the IO thread starts.
    await rts.c.stop(ctl.c.nodeName(3));
    await tickUntil(ctl.c, async () => await replicating(3), 'member 3 replicating after its restart');
    await silent();

    // Member 2 gone: a write waits for an acknowledgement the seeding member does not send.
    await rts.b.stop(ctl.b.nodeName(2));
    await tickUntil(ctl.c, async () => await clients() === 0, 'member 2 disconnected');
    let committed = false;
    const write = sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('no acknowledging replica')").then(() => (committed = true));
    await tickUntil(ctl.c, async () => Number(await withAdmin(await ctl.a.adminTarget(1), (x) => globalStatus(x, 'Rpl_semi_sync_master_wait_sessions'))) >= 1, 'the write waiting');
    expect(committed).toBe(false);

    // The member catches up (its SQL thread no longer held back): it turns acknowledging, the write commits.
    await sql('c', 3, 'STOP SLAVE');
    await sql('c', 3, 'CHANGE MASTER TO MASTER_DELAY=0');
    await sql('c', 3, 'START SLAVE');
    await tickUntil(ctl.c, async () => ctl.c.state?.seeding === undefined && await acking(3) === 1 && await clients() === 1, 'member 3 acknowledging');
    // MariaDB does not count the member's reconnection as acknowledging what it had received before
    // (the waiting write): the acknowledgement of the next write releases both.
    await sql('a', 1, "INSERT INTO seedack.t (v) VALUES ('the next write')");
    await write;
    expect(committed).toBe(true);
    expect(await rows(3)).toBe(4);
    // Member 2 back: both replicas acknowledge.
    await tickUntil(ctl.b, async () => await replicating(2) && await clients() === 2, 'member 2 back');
    expect([await acking(2), await acking(3)]).toEqual([1, 1]);
  }, 300_000);
});
