import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../../lib/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { HostHealing } from '../../../control-plane/domain/databases/host-healing.js';
import { FailoverCoordinator } from '../../../control-plane/domain/databases/failover-coordinator.js';
import { AGENT_SILENT_MS, FAILOVER_AFTER_MS } from '../../../control-plane/domain/databases/failover-decision.js';
import { agentContent } from '../../../control-plane/push/agent-desired.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const spread = databaseRecord({
  label: 'seedguard', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.79.0.1', hostSecondary: '127.79.0.2',
  provisioned: true, convergedGeneration: 1, agentId: 'a',
});

/**
 * A failover while a re-placed member is still being seeded (docs/multi-host.md, "Failover
 * candidates"): the member, restored from a base, reports a position past the other replica's
 * while it has not caught up, and is never named primary for it; when it is the only running
 * replica the cluster stays without a primary, says why in an event, and names it once its
 * "caught up" event exists. Real SQLite store, manual clock, the real healing round (which keeps
 * the seed mark) and failover coordinator; the agents' reports are written as the stream writes them.
 */
describe('a primary lost while a member is being seeded (SQLite store, manual clock)', () => {
  const store = useSqliteStore('seedguard');

  async function setup() {
    const { clock, repo, events } = store.open();
    const row = await repo.create(spread);
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    const down = new Set<string>();
    const seen = () => Promise.all(['a', 'b', 'c', 'd'].filter((id) => !down.has(id)).map((id) => repo.upsertAgent({
      id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [],
    })));
    const cut = async (id: string) => {
      down.add(id);
      await repo.upsertAgent({ ...(await repo.agent(id))!, connected: false });
    };
    const report = (member: number, agentId: string, role: string, gtid: string) => repo.putMemberReport({
      databaseId: row.id, member, agentId, state: 'running', role, gtid, address: `10.0.0.${agentId.charCodeAt(0) - 96}:3306`, reported: clock.now(),
    });
    await seen();
    for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) await report(k, agent, k === 1 ? 'primary' : 'replica', '0-1-40');
    const registry = createRegistry('control-plane');
    const healing = new HostHealing({ repo, events, clock, logger: silentLogger(), registry, revoke: async () => undefined, removed: async () => true });
    const failover = new FailoverCoordinator({ repo, events, clock, logger: silentLogger(), registry });
    // The coordinator acts only once its agents have had time to reconnect after its start.
    clock.advance(AGENT_SILENT_MS + 1000);
    await seen();
    // Host c lost: member 3 is placed on d and seeded from the primary at seq 40. It is restored
    // from a base at seq 38 and still applying what came after; member 2 lags at seq 30.
    await healing.declareLost('c', 'operator', 'test');
    await healing.tick();
    expect((await repo.members(row.id))[2]).toMatchObject({ agentId: 'd', seed: { gtid: 40 } });
    await report(2, 'b', 'replica', '0-1-30');
    await report(3, 'd', 'replica', '0-1-38');
    await healing.tick();
    expect((await repo.members(row.id))[2]!.seed).toBeDefined();
    // Each step: the clock moves, the live agents report, the coordinator decides.
    const step = async (ms: number) => {
      clock.advance(ms);
      await seen();
      await failover.tick();
      return (await repo.get(row.id))!;
    };
    const noPrimaryEvents = async () => (await events.list()).filter((e) => e.entity?.id === row.id && e.action === 'database_degraded' && /^No primary/.test(e.message ?? '')).map((e) => e.message);
    return { repo, row, healing, report, cut, step, noPrimaryEvents };
  }

  it('sends the mark to the member\'s agent until the healing round clears it, and that round asks for a push', async () => {
    const { repo, row, healing, report } = await setup();
    const sent = async () => agentContent('d', [(await repo.get(row.id))!], await repo.members(row.id), []).databases[0]!.members!.find((m) => m.index === 3)!;
    expect(await sent()).toMatchObject({ local: true, seeding: true });
    // Behind its mark: nothing changes, nothing to push.
    await report(3, 'd', 'replica', '0-1-39');
    expect(await healing.tick()).toBe(false);
    expect((await sent()).seeding).toBe(true);
    // Caught up: the mark is cleared and the round says so (the agents are sent the member unmarked).
    await report(3, 'd', 'replica', '0-1-40');
    expect(await healing.tick()).toBe(true);
    expect((await sent()).seeding).toBeUndefined();
    expect(await healing.tick()).toBe(false);
  });

  it('names the caught-up replica, not the seeding member that reports a position past it', async () => {
    const { row, cut, step } = await setup();
    await cut('a');
    expect((await step(0)).term).toBe(row.term);
    const db = await step(FAILOVER_AFTER_MS);
    expect([db.primaryMember, db.agentId, db.term]).toEqual([2, 'b', row.term + 1]);
  });

  it('the seeding member the only replica left: no primary, an event that says why (once), and it is named once it has caught up', async () => {
    const { repo, row, healing, report, cut, step, noPrimaryEvents } = await setup();
    await cut('a');
    await cut('b');
    await step(0);
    for (let i = 0; i < 3; i++) {
      const db = await step(FAILOVER_AFTER_MS);
      expect([db.primaryMember, db.term]).toEqual([1, row.term]);
    }
    expect(await noPrimaryEvents()).toEqual([expect.stringContaining('member 3 is still being seeded on a new host and is not promoted before it has caught up')]);
    expect((await repo.get(row.id))!.status).toBe('degraded');

    // It reaches the primary's position at its placement: the healing round clears the mark.
    await report(3, 'd', 'replica', '0-1-40');
    await healing.tick();
    expect((await repo.members(row.id))[2]!.seed).toBeUndefined();
    const db = await step(0);
    expect([db.primaryMember, db.agentId, db.term, db.primaryPosition]).toEqual([3, 'd', row.term + 1, '0-1-40']);
  });
});
