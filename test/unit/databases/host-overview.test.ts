import { describe, expect, it } from 'vitest';
import { HOST_EVENTS_KEPT, HOST_EVENTS_SCANNED, HostOverview, aboutHost, membersByHost } from '../../../control-plane/domain/databases/host-overview.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport } from '../../../control-plane/domain/databases/model.js';
import type { EventRecord } from '../../../control-plane/domain/events/model.js';

/**
 * What GET /v4/fulcrum/agents adds for the console's Fleet page (docs/api.md, "Fulcrum-only
 * endpoints"): each host's members with role and reported state, and the newest events about it.
 */
const db = (id: number, over: Partial<DatabaseRecord> = {}) => ({ id, label: `db-${id}`, primaryMember: 1, deleting: false, ...over }) as unknown as DatabaseRecord;
const report = (databaseId: number, member: number, agentId: string, o: Partial<MemberReport> = {}): MemberReport => ({
  databaseId, member, agentId, state: 'running', role: member === 1 ? 'primary' : 'replica', gtid: '0-1-5', address: '', reported: 1, ...o,
});
const agent = (id: string, o: Partial<AgentRecord> = {}): AgentRecord => ({
  id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: 1, appliedVersion: 1, engines: [], ...o,
});
const event = (id: number, message: string | null, hosts?: string[]): EventRecord => ({
  id, created: id * 1000, action: 'database_degraded', username: null, entity: { id: 1, type: 'database', label: 'db-1', url: '' }, secondaryEntity: null,
  status: 'notification', percentComplete: null, duration: null, message, ...(hosts ? { hosts } : {}), seen: false, read: false,
});

describe('the agents API view of each host', () => {
  it('lists each placed member of a live database on its host, with the role its agent reported and its state', () => {
    const placements: MemberPlacement[] = [
      { databaseId: 1, member: 1, agentId: 'a' }, { databaseId: 1, member: 2, agentId: 'b' }, { databaseId: 1, member: 3, agentId: '' },
      { databaseId: 2, member: 1, agentId: 'a' }, { databaseId: 3, member: 1, agentId: 'b' },
    ];
    const reports = [
      // Member 1 failed over: its agent says replica now, member 2 primary.
      report(1, 1, 'a', { role: 'replica' }), report(1, 2, 'b', { role: 'primary' }),
      // A report from an agent that no longer holds the member does not count.
      report(2, 1, 'old-host', { state: 'stopped' }),
    ];
    const by = membersByHost([db(1, { label: '<b>x</b>' }), db(2), db(3, { deleting: true })], placements, reports);
    expect(by.get('a')).toEqual([
      { databaseId: 1, label: '<b>x</b>', member: 1, role: 'replica', status: 'running' },
      // No report yet: the role the control plane named, no state.
      { databaseId: 2, label: 'db-2', member: 1, role: 'primary', status: null },
    ]);
    expect(by.get('b')).toEqual([{ databaseId: 1, label: '<b>x</b>', member: 2, role: 'primary', status: 'running' }]);
    // Placed nowhere (waiting for a host) is on no host; a database being deleted is not listed.
    expect(by.has('')).toBe(false);
    expect([...by.keys()].sort()).toEqual(['a', 'b']);
  });

  it('a reported "down" role falls back to the named one, its state says why', () => {
    const by = membersByHost([db(1, { primaryMember: 2 })], [{ databaseId: 1, member: 2, agentId: 'a' }], [report(1, 2, 'a', { role: 'down', state: 'stopped' })]);
    expect(by.get('a')).toEqual([{ databaseId: 1, label: 'db-1', member: 2, role: 'primary', status: 'stopped' }]);
  });

  it('an event is about a host when it was recorded with it among its hosts, whatever its message says', () => {
    expect(aboutHost(event(1, 'The host of member 2 (agent host-1) was declared lost', ['host-1']), 'host-1')).toBe(true);
    expect(aboutHost(event(1, 'Member 2 placed on agent host-1 (its host host-9 was lost)', ['host-1', 'host-9']), 'host-9')).toBe(true);
    // Not a prefix of a longer id.
    expect(aboutHost(event(1, 'Member 2 placed on agent host-10', ['host-10']), 'host-1')).toBe(false);
    // Text that spells "agent ID" (an agent's own words, a tenant's label in a message) names no host.
    expect(aboutHost(event(1, 'node 2 rebuilt for agent host-1'), 'host-1')).toBe(false);
    expect(aboutHost(event(1, null), 'host-1')).toBe(false);
  });

  it('gives every agent its state, members and at most a few of the newest events naming it, from one bounded page', async () => {
    const pages: [number, number][] = [];
    const newest = [
      event(10, 'A message that says agent c, recorded about no host'),
      event(9, 'Member 2 placed on agent b (its host a was lost)', ['b', 'a']),
      ...Array.from({ length: 8 }, (_, k) => event(8 - k, `The host of member 1 (agent a) was declared lost (${k})`, ['a'])),
    ];
    const overview = new HostOverview({
      repo: {
        agents: async () => [agent('a', { connected: false, lostAt: 5 }), agent('b'), agent('c', { connected: false })],
        list: async () => [db(1)],
        members: async () => [{ databaseId: 1, member: 1, agentId: 'b' }],
        memberReports: async () => [report(1, 1, 'b')],
      },
      events: { page: async (_scope, offset, limit) => { pages.push([offset, limit]); return { events: newest, total: 100_000 }; } },
    });
    const [a, b, c] = await overview.agents();
    expect(pages).toEqual([[0, HOST_EVENTS_SCANNED]]);
    expect([a!.state, b!.state, c!.state]).toEqual(['lost', 'up', 'unreachable']);
    expect([a!.lostAt, b!.lostAt]).toEqual([5, null]);
    expect(a!.members).toEqual([]);
    expect(b!.members).toEqual([{ databaseId: 1, label: 'db-1', member: 1, role: 'primary', status: 'running' }]);
    expect(a!.recentEvents.map((e) => e.id)).toEqual([9, 8, 7, 6, 5].slice(0, HOST_EVENTS_KEPT));
    expect(b!.recentEvents.map((e) => e.id)).toEqual([9]);
    expect(c!.recentEvents).toEqual([]);
  });

  it('gives a draining host its drain with the members still on it, and null for the others', async () => {
    const overview = new HostOverview({
      repo: {
        agents: async () => [agent('a', { drainingAt: 7 }), agent('b'), agent('c', { drainingAt: 9 })],
        list: async () => [db(1), db(2, { deleting: true })],
        members: async () => [{ databaseId: 1, member: 1, agentId: 'a' }, { databaseId: 1, member: 2, agentId: 'b' }, { databaseId: 2, member: 1, agentId: 'c' }],
        memberReports: async () => [report(1, 1, 'a', { role: 'fenced' })],
      },
      events: { page: async () => ({ events: [], total: 0 }) },
    });
    const [a, b, c] = await overview.agents();
    expect([a!.draining, a!.drainingAt, a!.drain]).toEqual([true, 7, { membersLeft: 1 }]);
    expect([b!.draining, b!.drainingAt, b!.drain]).toEqual([false, null, null]);
    // A deleted database's member is no member left: the drain is done.
    expect(c!.drain).toEqual({ membersLeft: 0 });
    // A primary fenced for a switchover is shown as the primary the control plane named.
    expect(a!.members[0]!.role).toBe('primary');
  });
});
