import { describe, expect, it } from 'vitest';
import { createRegistry } from '../../../lib/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { HostHealing } from '../../../control-plane/domain/databases/host-healing.js';
import { FailoverCoordinator } from '../../../control-plane/domain/databases/failover-coordinator.js';
import { AGENT_SILENT_MS } from '../../../control-plane/domain/databases/failover-decision.js';
import { DatabaseObserver } from '../../../control-plane/domain/databases/observer.js';
import { HostOverview } from '../../../control-plane/domain/databases/host-overview.js';
import type { DatabaseService } from '../../../control-plane/domain/databases/database-service.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const spread = databaseRecord({
  label: 'seeding', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
  provisioned: true, convergedGeneration: 1, agentId: 'a',
});

/**
 * The status of a spread cluster while a member placed on a new host is seeded (docs/multi-host.md,
 * "A lost host"): `degraded` from the placement until the member reports itself a replica at least
 * as far as the primary was then, and `active` only once the "caught up" event exists; the member
 * is no failover in `members` meanwhile. Real SQLite store, manual clock, the real observer,
 * healing round and failover coordinator; the agents' reports are written as the stream writes them.
 */
describe('a re-placed member being seeded (SQLite store, manual clock)', () => {
  const store = useSqliteStore('seed');

  async function setup() {
    const { clock, repo, events } = store.open();
    const row = await repo.create(spread);
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    const seen = () => Promise.all(['a', 'b', 'c', 'd'].map((id) => repo.upsertAgent({
      id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [],
    })));
    await seen();
    const report = (member: number, agentId: string, role: string, gtid: string, state = 'running') => repo.putMemberReport({
      databaseId: row.id, member, agentId, state, role, gtid, address: `10.0.0.${agentId.charCodeAt(0) - 96}:3306`, reported: clock.now(),
    });
    for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) await report(k, agent, k === 1 ? 'primary' : 'replica', '0-1-40');
    const registry = createRegistry('control-plane');
    // A lost host stays removed (no new join token) in these tests.
    const healing = new HostHealing({ repo, events, clock, logger: silentLogger(), registry, revoke: async () => undefined, removed: async () => true });
    const failover = new FailoverCoordinator({ repo, events, clock, logger: silentLogger(), registry });
    const observer = new DatabaseObserver({ repo, events, service: {} as DatabaseService, clock, logger: silentLogger() });
    // The primary's agent says the database is active, as it does all along.
    const observe = async () => {
      await observer.apply('a', [{ id: row.id, status: 'active', members: {}, caCertPem: '', error: '', usedDiskMb: 0, convergedGeneration: 1, backups: [], events: [] }], []);
      return (await repo.get(row.id))!;
    };
    const caughtUpEvents = async () => (await events.list()).filter((e) => e.entity?.id === row.id && e.action === 'database_update' && /caught up with the primary/.test(e.message ?? ''));
    // The coordinator acts only once its agents have had time to reconnect after its start.
    clock.advance(AGENT_SILENT_MS + 1000);
    await seen();
    return { clock, repo, row, healing, failover, observe, report, caughtUpEvents, registry, events, seen };
  }

  it('a member re-placed after its host was lost: degraded (and no failover) until it caught up, active only once the event exists', async () => {
    const { repo, row, healing, failover, observe, report, caughtUpEvents, registry, events } = await setup();
    expect((await observe()).status).toBe('active');
    await failover.tick();
    expect(Object.values((await repo.get(row.id))!.members).sort()).toEqual(['failover', 'failover', 'primary']);

    // Degraded from the declaration on, before any agent speaks again (the primary's agent may be the lost one).
    await healing.declareLost('c', 'operator', 'test');
    expect((await repo.get(row.id))!.status).toBe('degraded');
    expect(await healing.tick()).toBe(true);
    const placed = (await repo.members(row.id))[2]!;
    expect(placed).toMatchObject({ agentId: 'd', seed: { gtid: 40 } });
    expect(await registry.metrics()).toMatch(/fulcrum_database_members_seeding\{[^}]*\} 1\n/);
    expect((await observe()).status).toBe('degraded');

    // Its agent builds it and reports it: running, then a replica still behind the primary's
    // position at placement. Whole on paper, but only two members hold the data.
    await report(3, 'd', 'replica', '', 'stopped');
    await healing.tick();
    expect((await observe()).status).toBe('degraded');
    await report(3, 'd', 'replica', '0-1-12');
    await healing.tick();
    await failover.tick();
    const seeding = (await observe());
    expect(seeding.status).toBe('degraded');
    expect(await caughtUpEvents()).toEqual([]);
    // It is left out of `members` (so out of hosts.secondary's routes) while it is seeded.
    expect(seeding.members).toEqual({ '10.0.0.1': 'primary', '10.0.0.2': 'failover' });

    // Far enough, but the healing round has not said so yet: still degraded.
    await report(3, 'd', 'replica', '0-1-40');
    expect((await observe()).status).toBe('degraded');
    await healing.tick();
    expect(await caughtUpEvents()).toHaveLength(1);
    expect((await repo.members(row.id))[2]!.seed).toBeUndefined();
    expect(await registry.metrics()).toMatch(/fulcrum_database_members_seeding\{[^}]*\} 0\n/);
    expect((await observe()).status).toBe('active');
    await failover.tick();
    expect((await repo.get(row.id))!.members).toEqual({ '10.0.0.1': 'primary', '10.0.0.2': 'failover', '10.0.0.4': 'failover' });
    // Said once.
    await healing.tick();
    expect(await caughtUpEvents()).toHaveLength(1);

    // The Fleet page finds each host's events by the hosts they were recorded with, not by their
    // text: an event that merely says "agent d" is not d's.
    await events.record('database_update', { id: row.id, type: 'database', label: 'agent d', url: '' }, { message: 'A label that reads agent d' });
    const fleet = new Map((await new HostOverview({ repo, events }).agents()).map((a) => [a.id, a.recentEvents.map((e) => e.message)]));
    expect(fleet.get('d')).toEqual([
      'Member 3 on agent d caught up with the primary in 0 s: 3 members on 3 hosts.',
      'Member 3 placed on agent d (its host was lost); it is built there and seeded from the primary, member 1.',
    ]);
    expect(fleet.get('c')).toEqual(['The host of member 3 (agent c) was declared lost (test); it is fenced, and the member is re-placed on another host.']);
    expect(fleet.get('a')).toEqual([]);
  });

  it('a drain\'s replacement member is degraded until it caught up too, and a new lease holder goes on watching it', async () => {
    const { clock, repo, events, row, healing, observe, report, caughtUpEvents } = await setup();
    await repo.setAgentDraining('b', clock.now());
    expect(await healing.moveOff((await repo.get(row.id))!, 2, 'b')).toBe('d');
    await report(2, 'd', 'replica', '0-1-3');
    expect((await observe()).status).toBe('degraded');
    const said = (await events.list()).filter((e) => e.entity?.id === row.id && e.action === 'database_degraded').map((e) => e.message);
    expect(said).toEqual(['Member 2 is being seeded on a new host: until it has caught up with the primary, the other members alone hold the data.']);
    // Another control-plane replica takes the lease: the mark is in the store, not in the old holder's memory.
    const next = new HostHealing({ repo, events, clock, logger: silentLogger(), revoke: async () => undefined, removed: async () => true });
    await report(2, 'd', 'replica', '0-1-41');
    await next.tick();
    expect(await caughtUpEvents()).toHaveLength(1);
    expect((await observe()).status).toBe('active');
  });

  it('a seeding member named primary meanwhile is seeded no longer (a primary never reports itself a replica)', async () => {
    const { repo, row, healing, events } = await setup();
    await healing.declareLost('c', 'operator', 'test');
    await healing.tick();
    expect((await repo.members(row.id))[2]!.seed).toBeDefined();
    await repo.update(row.id, { term: 2, primaryMember: 3, agentId: 'd' });
    await healing.tick();
    expect((await repo.members(row.id))[2]!.seed).toBeUndefined();
    expect((await events.list()).map((e) => e.message)).toContain('Member 3 on agent d was named primary before it had caught up; it is seeded no longer.');
  });
});
