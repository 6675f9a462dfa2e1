import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../../lib/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { HostHealing } from '../../../control-plane/domain/databases/host-healing.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const spread = databaseRecord({
  label: 'spread', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
  provisioned: true, convergedGeneration: 1, agentId: 'a',
});

/**
 * Host healing over the real SQLite store, driven by a ManualClock: --host-lost-after declares a
 * silent host lost by itself (fenced through `revoke`), never before the control plane has run
 * that long, and the metrics count it; a lost primary's member waits for the failover.
 */
describe('host healing (SQLite store, manual clock)', () => {
  const store = useSqliteStore('heal');

  async function setup(lostAfterMs?: number) {
    const { clock, repo, events } = store.open();
    const row = await repo.create(spread);
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    const seen = (id: string, connected = true) => repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
    for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) {
      await seen(agent);
      await repo.putMemberReport({ databaseId: row.id, member: k, agentId: agent, state: 'running', role: k === 1 ? 'primary' : 'replica', gtid: `0-1-${10 + k}`, address: `10.0.0.${k}:3306`, reported: clock.now() });
    }
    const revoked: string[] = [];
    const registry = createRegistry('control-plane');
    const healing = new HostHealing({
      repo, events, clock, logger: silentLogger(), registry, lostAfterMs,
      revoke: async (id) => revoked.push(id), removed: async (id) => revoked.includes(id),
    });
    return { clock, repo, row, seen, healing, revoked, registry, events };
  }

  it('without --host-lost-after never declares a silent host lost', async () => {
    const { clock, repo, seen, healing, revoked } = await setup();
    await seen('b', false);
    clock.advance(30 * 86_400_000);
    await healing.tick();
    expect(revoked).toEqual([]);
    expect((await repo.agent('b'))!.lostAt).toBeNull();
  });

  it('with --host-lost-after declares a host lost once it has been silent that long (fenced), and re-places nothing without a free host', async () => {
    const { clock, repo, row, seen, healing, revoked, registry } = await setup(120_000);
    await seen('b', false);
    clock.advance(119_000);
    for (const a of ['a', 'c']) await seen(a);
    await healing.tick();
    expect(revoked).toEqual([]);
    clock.advance(2000);
    for (const a of ['a', 'c']) await seen(a);
    expect(await healing.tick()).toBe(true);
    expect(revoked).toEqual(['b']);
    expect((await repo.agent('b'))!.lostAt).toBe(clock.now());
    // Member 2 has no host: a, c hold members and there is no other agent.
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['a', '', 'c']);
    const metrics = await registry.metrics();
    expect(metrics).toMatch(/fulcrum_agent_hosts_lost_total\{by="timeout"[^}]*\} 1\n/);
    expect(metrics).toMatch(/fulcrum_agent_hosts\{state="lost"[^}]*\} 1\n/);
    expect(metrics).toMatch(/fulcrum_database_members_homeless\{[^}]*\} 1\n/);
    // A fourth host joins: member 2 goes there.
    await seen('d');
    expect(await healing.tick()).toBe(true);
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['a', 'd', 'c']);
    expect(await registry.metrics()).toMatch(/fulcrum_database_members_replaced_total\{[^}]*\} 1\n/);
  });

  it('keeps a lost primary\'s member where it is until another primary is named', async () => {
    const { repo, row, seen, healing } = await setup();
    await seen('d');
    await healing.declareLost('a', 'operator', 'test');
    await healing.tick();
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['a', 'b', 'c']);
    // The failover coordinator names member 2 (term 2); member 1 then moves to the free host.
    await repo.update(row.id, { term: 2, primaryMember: 2, agentId: 'b' });
    await repo.putMemberReport({ databaseId: row.id, member: 2, agentId: 'b', state: 'running', role: 'primary', gtid: '0-1-12', address: '10.0.0.2:3306', reported: 1 });
    expect(await healing.tick()).toBe(true);
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['d', 'b', 'c']);
  });

  it('leaves a database whose members all ran on the lost host where it is, with an event saying so', async () => {
    const { repo, seen, healing, events } = await setup();
    await seen('d');
    const single = await repo.create({ ...spread, label: 'single', clusterSize: 1, replicationType: 'none', agentId: 'b' });
    await repo.setMembers(single.id, ['b']);
    await healing.declareLost('b', 'operator', 'test');
    await healing.tick();
    expect((await repo.members(single.id)).map((m) => m.agentId)).toEqual(['b']);
    const said = (await events.list()).filter((e) => e.entity?.id === single.id).map((e) => e.message ?? '');
    expect(said.some((m) => m.includes('it is not rebuilt elsewhere: its backups and binlog archive were in the lost host\'s state folder'))).toBe(true);
    expect((await repo.get(single.id))!.recovery).toBeNull();
  });

  it('rebuilds a 1-node database of a lost host on an agent sharing its object store, and waits with an event while there is none', async () => {
    const { clock, repo, seen, healing, events, registry } = await setup();
    const onStore = (id: string, backupStore: string) => repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: false, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [], backupStore });
    await onStore('s1', 's3:https://store/b/us-east');
    await onStore('other', 's3:https://elsewhere/b/us-east');
    const single = await repo.create({ ...spread, label: 'single', clusterSize: 1, replicationType: 'none', agentId: 's1', backupKey: 'k'.repeat(43), generation: 4 });
    await repo.setMembers(single.id, ['s1']);
    await healing.declareLost('s1', 'operator', 'test');
    expect((await repo.get(single.id))!.recovery).toEqual({ from: 's1', lostMs: clock.now() });
    // No other agent on that store (a, b, c, d and "other" are not): it stays, and says why once.
    expect(await healing.tick()).toBe(false);
    await healing.tick();
    const said = async () => (await events.list()).filter((e) => e.entity?.id === single.id).map((e) => e.message ?? '');
    expect((await said()).filter((m) => m.includes('no host to be rebuilt on'))).toHaveLength(1);
    expect((await said()).some((m) => m.includes('it is rebuilt on another host of the region from the object store'))).toBe(true);
    expect((await repo.members(single.id)).map((m) => m.agentId)).toEqual(['s1']);
    // An agent on the same store joins: the database is placed there, degraded until it is back.
    clock.advance(1000);
    for (const a of ['a', 'b', 'c']) await seen(a);
    await onStore('s2', 's3:https://store/b/us-east');
    expect(await healing.tick()).toBe(true);
    expect((await repo.members(single.id)).map((m) => m.agentId)).toEqual(['s2']);
    const moved = (await repo.get(single.id))!;
    expect(moved).toMatchObject({ agentId: 's2', status: 'degraded', generation: 5, members: {}, recovery: { from: 's1', placedMs: clock.now() } });
    expect((await said()).some((m) => m.startsWith('Placed on agent s2 (its host, agent s1, was lost)'))).toBe(true);
    expect(await registry.metrics()).toMatch(/fulcrum_database_recoveries_total\{[^}]*\} 1\n/);
    // Placed once: the next round leaves it.
    expect(await healing.tick()).toBe(false);
  });

  it('leaves a 1-node database on its lost host when that host joins again before another on its store does', async () => {
    const { clock, repo, healing, revoked } = await setup();
    const onStore = (id: string) => repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: false, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [], backupStore: 's3:https://store/b/p' });
    await onStore('s1');
    const single = await repo.create({ ...spread, label: 'single', clusterSize: 1, replicationType: 'none', agentId: 's1', backupKey: 'k'.repeat(43) });
    await repo.setMembers(single.id, ['s1']);
    await healing.declareLost('s1', 'operator', 'test');
    await healing.tick();
    // It joins again with a new join token (its removal cleared): the database is its own again.
    revoked.splice(0);
    await onStore('s1');
    await healing.tick();
    expect((await repo.get(single.id))!.recovery).toBeNull();
    await onStore('s2');
    await healing.tick();
    expect((await repo.members(single.id)).map((m) => m.agentId)).toEqual(['s1']);
  });
});
