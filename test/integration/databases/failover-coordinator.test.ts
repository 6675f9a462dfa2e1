import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../../lib/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { FailoverCoordinator } from '../../../control-plane/domain/databases/failover-coordinator.js';
import { AGENT_SILENT_MS, FAILOVER_AFTER_MS } from '../../../control-plane/domain/databases/failover-decision.js';
import type { DatabaseRepository } from '../../../control-plane/domain/databases/repository.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const spread = databaseRecord({
  label: 'spread', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
  provisioned: true, convergedGeneration: 1, agentId: 'a',
});

/**
 * The coordinator over the real SQLite store and event log, driven by a ManualClock: what it
 * reads (agents' connection and last report, member placements), what it writes (term, primary
 * member, reporting agent, members, the event).
 */
describe('failover coordinator (SQLite store, manual clock)', () => {
  const store = useSqliteStore('mh-cluster-coord');

  async function setup() {
    const { clock, repo, events } = store.open();
    const row = await repo.create(spread);
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    const seen = (id: string, connected = true) => repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
    const report = async () => {
      for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) {
        if ((await repo.agent(agent))?.connected === false) continue;
        await seen(agent);
        await coord.record(agent, [{ id: row.id, nodes: [{ member: k, state: 'running', role: k === 1 ? 'primary' : 'replica', gtid: `0-1-${10 + k}`, address: `10.0.0.${k}:3306` }] }]);
      }
    };
    const registry = createRegistry('control-plane');
    const coord = new FailoverCoordinator({ repo, events, clock, logger: silentLogger(), registry });
    return { clock, repo, events, coord, row, seen, report, registry };
  }

  it('does nothing in its first AGENT_SILENT_MS (agents are still reconnecting), then assembles members', async () => {
    const { clock, repo, coord, row, seen } = await setup();
    // Only b and c are back; a (the primary's agent) is slower.
    await seen('a', false);
    await seen('b');
    await seen('c');
    clock.advance(AGENT_SILENT_MS - 1);
    expect((await coord.tick())).toBe(false);
    expect((await repo.get(row.id))!.term).toBe(1);
  });

  it('promotes, records the event and the metrics, moves the reporting agent and the members, and leaves a healthy cluster alone', async () => {
    const { clock, repo, events, coord, row, seen, report, registry } = await setup();
    clock.advance(AGENT_SILENT_MS);
    await report();
    expect((await coord.tick())).toBe(true); // members assembled
    expect((await repo.get(row.id))!.members).toEqual({ '10.0.0.1': 'primary', '10.0.0.2': 'failover', '10.0.0.3': 'failover' });
    for (let i = 0; i < 10; i++) {
      clock.advance(500);
      await report();
      expect((await coord.tick())).toBe(false);
    }
    await seen('a', false);
    clock.advance(500);
    await report();
    expect((await coord.tick())).toBe(false);
    expect(await registry.getSingleMetricAsString('fulcrum_database_primary_lost')).toMatch(/fulcrum_database_primary_lost(\{[^}]*\})? 1\b/);
    clock.advance(FAILOVER_AFTER_MS);
    await report();
    expect((await coord.tick())).toBe(true);
    // Named for the position of member 3's report (0-1-13), which its agent checks before promoting.
    expect((await repo.get(row.id))).toMatchObject({ term: 2, primaryMember: 3, primaryPosition: '0-1-13', agentId: 'c', members: { '10.0.0.1': 'failover', '10.0.0.2': 'failover', '10.0.0.3': 'primary' } });
    expect((await coord.primaryOf(row.id))).toEqual({ databaseId: row.id, term: 2, member: 3, agentId: 'c', address: '10.0.0.3:3306' });
    expect(await registry.getSingleMetricAsString('fulcrum_database_failovers_total')).toMatch(/fulcrum_database_failovers_total(\{[^}]*\})? 1\b/);
    expect(await registry.getSingleMetricAsString('fulcrum_database_primary_lost')).toMatch(/fulcrum_database_primary_lost(\{[^}]*\})? 0\b/);
    const ev = (await events.list()).filter((e) => e.action === 'database_failover');
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({ status: 'notification', entity: { id: row.id, type: 'database' } });
    expect(ev[0]!.message).toBe('Member 3 on agent c promoted to primary (term 2): the agent a of the primary is disconnected.');
    // The new primary is healthy: no second promotion.
    clock.advance(FAILOVER_AFTER_MS * 2);
    await report();
    expect((await coord.tick())).toBe(false);
    expect((await repo.get(row.id))!.term).toBe(2);
  });

  it('only keeps what an agent says about its own members', async () => {
    const { clock, repo, coord, row, seen } = await setup();
    clock.advance(AGENT_SILENT_MS);
    for (const a of ['a', 'b', 'c']) await seen(a);
    // Agent b claims member 1 is down: ignored (member 1 is a's).
    await coord.record('b', [{ id: row.id, nodes: [{ member: 1, state: 'stopped', role: 'down', gtid: '', address: '10.9.9.9:3306' }] }]);
    await coord.record('a', [{ id: row.id, nodes: [{ member: 1, state: 'running', role: 'primary', gtid: '0-1-1', address: '10.0.0.1:3306' }] }]);
    clock.advance(FAILOVER_AFTER_MS * 2);
    for (const a of ['a', 'b', 'c']) await seen(a);
    await coord.tick();
    expect((await repo.get(row.id))!.term).toBe(1);
    expect((await coord.primaryOf(row.id))!.address).toBe('10.0.0.1:3306');
  });

  it('reads only the current members\' rows: a stale row (a member past the size, another agent\'s) feeds neither members nor the primary', async () => {
    const { clock, repo, coord, row, report } = await setup();
    clock.advance(AGENT_SILENT_MS);
    await report();
    await coord.tick();
    expect((await repo.get(row.id))!.members).toEqual({ '10.0.0.1': 'primary', '10.0.0.2': 'failover', '10.0.0.3': 'failover' });
    // Rows as an older control plane could leave them: member 4 (past the size) and member 1
    // written by an agent that does not run it.
    const stale = { databaseId: row.id, state: 'running', role: 'primary', gtid: '0-1-99', reported: clock.now() };
    await repo.putMemberReport({ ...stale, member: 4, agentId: 'a', address: '10.9.9.4:3306' });
    await repo.putMemberReport({ ...stale, member: 1, agentId: 'x', address: '10.9.9.1:3306' });
    clock.advance(500);
    await coord.tick();
    expect(Object.keys((await repo.get(row.id))!.members).sort()).toEqual(['10.0.0.2', '10.0.0.3']);
    expect((await coord.primaryOf(row.id))).toMatchObject({ member: 1, agentId: 'a', address: '' });
    // Member 1's own agent reports again: its row counts once more.
    clock.advance(500);
    await report();
    await coord.tick();
    expect((await repo.get(row.id))!.members).toEqual({ '10.0.0.1': 'primary', '10.0.0.2': 'failover', '10.0.0.3': 'failover' });
    expect((await coord.primaryOf(row.id))!.address).toBe('10.0.0.1:3306');
    expect((await repo.get(row.id))!.term).toBe(1);
  });

  it('a report racing a scale down brings back no row the scale removed', async () => {
    const { clock, repo: store, events } = await setup();
    const one = await store.create({ ...spread, label: 'one-agent' });
    await store.setMembers(one.id, ['a', 'a', 'a']);
    // The scale down (placements and size in one transaction, as the API does it) commits right
    // after the report has read the placements and before it writes: the race, made certain.
    let raced = false;
    const repo: DatabaseRepository = {
      ...store,
      async memberReports(id) {
        if (!raced && id === one.id) {
          raced = true;
          await store.transaction(async () => {
            await store.setMembers(one.id, ['a']);
            await store.update(one.id, { clusterSize: 1, replicationType: 'none' });
          });
        }
        return store.memberReports(id);
      },
    };
    const coord = new FailoverCoordinator({ repo, events, clock, logger: silentLogger(), registry: createRegistry('control-plane') });
    const nodes = [1, 2, 3].map((k) => ({ member: k, state: 'running', role: k === 1 ? 'primary' : 'replica', gtid: `0-1-${k}`, address: `10.0.2.${k}:3306` }));
    await coord.record('a', [{ id: one.id, nodes }]);
    expect(raced).toBe(true);
    expect((await store.memberReports(one.id)).map((r) => r.member)).toEqual([1]);
  });

  it('names another member holding the position when the promoted one reports itself behind it (wiped or rebuilt meanwhile)', async () => {
    const { clock, repo, coord, row, seen } = await setup();
    await repo.update(row.id, { term: 5, primaryMember: 3, primaryPosition: '0-1-40', agentId: 'c' });
    const say = async (k: number, agent: string, role: string, gtid: string) => {
      await seen(agent);
      await coord.record(agent, [{ id: row.id, nodes: [{ member: k, state: 'running', role, gtid, address: `10.0.0.${k}:3306` }] }]);
    };
    const round = async () => {
      await say(1, 'a', 'replica', '0-1-41');
      // Further on by sum (another domain) but short of 0-1-40 in domain 0.
      await say(2, 'b', 'replica', '0-1-39,1-2-50');
      await say(3, 'c', 'behind', '0-1-7');
    };
    clock.advance(AGENT_SILENT_MS);
    await round();
    expect(await coord.tick()).toBe(true); // members assembled; the loss starts
    clock.advance(FAILOVER_AFTER_MS);
    await round();
    expect(await coord.tick()).toBe(true);
    // Member 1 holds 0-1-40; member 2 would lose acknowledged writes and is passed over.
    expect(await repo.get(row.id)).toMatchObject({ term: 6, primaryMember: 1, primaryPosition: '0-1-41', agentId: 'a' });
  });
});
