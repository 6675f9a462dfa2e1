import { describe, expect, it } from 'vitest';
import { fencePosition, stillAsFound, switchoverTarget } from '../../../control-plane/domain/databases/switchover.js';
import { drainRefusals, drainStep, membersOn } from '../../../control-plane/domain/databases/host-drain.js';
import { moveTarget, stillOn } from '../../../control-plane/domain/databases/single-move.js';
import { decideFailover, FAILOVER_AFTER_MS, FENCE_ABANDONED_MS, type MemberView } from '../../../control-plane/domain/databases/failover-decision.js';
import { replacementAgent } from '../../../control-plane/domain/databases/host-healing.js';
import type { AgentRecord, DatabaseRecord, MemberReport } from '../../../control-plane/domain/databases/model.js';

const NOW = 1_000_000;
const agent = (id: string, o: Partial<AgentRecord> = {}): AgentRecord => ({
  id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: NOW - 1000, appliedVersion: 1, engines: [], lostAt: null, drainingAt: null, ...o,
});
const placed = (agents: string[], databaseId = 7) => agents.map((agentId, k) => ({ databaseId, member: k + 1, agentId }));
const report = (member: number, agentId: string, o: Partial<MemberReport> = {}): MemberReport => ({
  databaseId: 7, member, agentId, state: 'running', role: member === 1 ? 'primary' : 'replica', gtid: '0-1-5', address: `10.0.0.${member}:3306`, reported: 1, ...o,
});
const database = (o: Partial<DatabaseRecord> = {}) => ({ id: 7, label: 'db7', region: 'us-east', primaryMember: 1, term: 4, runState: 'running', provisioned: true, deleting: false, agentId: 'a', ...o }) as DatabaseRecord;

describe('planned switchover: the target', () => {
  const agents = [agent('a'), agent('b'), agent('c')];
  it('is the most advanced running replica (ties: the lowest member), never the primary', () => {
    const reports = [report(1, 'a'), report(2, 'b', { gtid: '0-1-9' }), report(3, 'c', { gtid: '0-1-12' })];
    expect(switchoverTarget(database(), placed(['a', 'b', 'c']), reports, agents, NOW)).toEqual({ member: 3, agentId: 'c' });
    const even = [report(1, 'a'), report(2, 'b'), report(3, 'c')];
    expect(switchoverTarget(database(), placed(['a', 'b', 'c']), even, agents, NOW)).toEqual({ member: 2, agentId: 'b' });
  });
  it('skips replicas that are down, on a draining, lost, silent or disconnected host, or on a host to avoid', () => {
    const reports = [report(1, 'a'), report(2, 'b', { gtid: '0-1-9' }), report(3, 'c')];
    const p = placed(['a', 'b', 'c']);
    expect(switchoverTarget(database(), p, reports, [agent('a'), agent('b', { drainingAt: 1 }), agent('c')], NOW)).toEqual({ member: 3, agentId: 'c' });
    expect(switchoverTarget(database(), p, reports, [agent('a'), agent('b', { lostAt: 1 }), agent('c')], NOW)?.member).toBe(3);
    expect(switchoverTarget(database(), p, reports, [agent('a'), agent('b', { lastSeen: NOW - 60_000 }), agent('c')], NOW)?.member).toBe(3);
    expect(switchoverTarget(database(), p, reports, [agent('a'), agent('b', { connected: false }), agent('c')], NOW)?.member).toBe(3);
    expect(switchoverTarget(database(), p, reports, agents, NOW, new Set(['b']))?.member).toBe(3);
    expect(switchoverTarget(database(), p, [report(1, 'a'), report(2, 'b', { role: 'down' }), report(3, 'c', { state: 'stopped' })], agents, NOW)).toBeUndefined();
    // A report from an agent the member is not placed on does not count.
    expect(switchoverTarget(database(), p, [report(1, 'a'), report(2, 'x'), report(3, 'x')], agents, NOW)).toBeUndefined();
  });
  it('never names a member still being seeded on a new host, however far the position it reports', () => {
    const reports = [report(1, 'a'), report(2, 'b', { gtid: '0-1-9' }), report(3, 'c', { gtid: '0-1-12' })];
    const seeding = placed(['a', 'b', 'c']).map((m) => (m.member === 3 ? { ...m, seed: { since: 1, gtid: 20 } } : m));
    expect(switchoverTarget(database(), seeding, reports, agents, NOW)).toEqual({ member: 2, agentId: 'b' });
    expect(switchoverTarget(database(), seeding, reports, [agent('a'), agent('b', { connected: false }), agent('c')], NOW)).toBeUndefined();
  });
  it('names nobody once the cluster changed under it (a failover, a scale, a delete)', () => {
    const found = { term: 4, primary: 1 };
    const target = { member: 2, agentId: 'b' };
    expect(stillAsFound(database(), placed(['a', 'b', 'c']), found, target)).toBe(true);
    expect(stillAsFound(database({ term: 5 }), placed(['a', 'b', 'c']), found, target)).toBe(false);
    expect(stillAsFound(database({ primaryMember: 3 }), placed(['a', 'b', 'c']), found, target)).toBe(false);
    expect(stillAsFound(database({ deleting: true }), placed(['a', 'b', 'c']), found, target)).toBe(false);
    expect(stillAsFound(undefined, placed(['a', 'b', 'c']), found, target)).toBe(false);
    expect(stillAsFound(database(), placed(['a', 'd', 'c']), found, target)).toBe(false);
  });
});

describe('a fence\'s answer', () => {
  it('is kept only as a GTID position of bounded length', () => {
    expect(fencePosition('0-1-42')).toBe('0-1-42');
    expect(fencePosition('0-1-42,1-2-7')).toBe('0-1-42,1-2-7');
    for (const bad of [undefined, '', '0-1', 'x-1-2', '0-1-2;DROP', '0-1-2,', ' 0-1-2', Array.from({ length: 200 }, (_, k) => `${k}-1-1`).join(',')]) {
      expect(fencePosition(bad)).toBeNull();
    }
  });
});

describe('a fenced primary and the failover coordinator', () => {
  const members = (role: string): MemberView[] => [1, 2, 3].map((k) => ({
    member: k, agentId: `a${k}`, agentConnected: true, agentSeenAt: NOW, node: { state: 'running', role: k === 1 ? role : 'replica', gtid: `0-1-${k}` },
  }));
  const input = (role: string, lostSince: number | null) => ({ clusterSize: 3, term: 4, primaryMember: 1, members: members(role), lostSince });
  it('waits FENCE_ABANDONED_MS (not the usual wait) before taking a fenced primary for lost', () => {
    expect(decideFailover(input('primary', null), NOW).kind).toBe('healthy');
    expect(decideFailover(input('fenced', NOW - FAILOVER_AFTER_MS - 1), NOW).kind).toBe('waiting');
    expect(FENCE_ABANDONED_MS).toBeGreaterThan(10_000);
    const d = decideFailover(input('fenced', NOW - FENCE_ABANDONED_MS), NOW);
    expect(d).toMatchObject({ kind: 'promote', member: 3, term: 5 });
  });
});

describe('draining a host', () => {
  const agents = [agent('a'), agent('b'), agent('c'), agent('d')];
  it('is refused up front when a member there has nowhere to go, or the database is not spread', () => {
    const p = placed(['a', 'b', 'c']);
    expect(drainRefusals('a', [database()], p, agents, NOW)).toEqual([]);
    const noRoom = drainRefusals('a', [database()], p, agents.slice(0, 3), NOW);
    expect(noRoom).toHaveLength(1);
    expect(noRoom[0]).toMatch(/database 7 \(db7\) has no other host to go to.*region us-east/);
    // A fourth host that is draining, lost, silent, in another region or single-host only does not count.
    for (const d of [agent('d', { drainingAt: 1 }), agent('d', { lostAt: 1 }), agent('d', { lastSeen: NOW - 60_000 }), agent('d', { region: 'eu-west' }), agent('d', { membersAcrossHosts: false })]) {
      expect(drainRefusals('a', [database()], p, [...agents.slice(0, 3), d], NOW)).toHaveLength(1);
    }
    const single = drainRefusals('a', [database({ id: 8, label: 'one', clusterSize: 3 })], placed(['a', 'a', 'a'], 8), agents, NOW);
    expect(single).toEqual(['database 8 (one) runs all its members on this host; moving a cluster that is not spread over hosts is not built']);
    // A member on a host already draining needs the free host too.
    expect(drainRefusals('b', [database()], p, [agent('a', { drainingAt: 1 }), ...agents.slice(1)], NOW)).toHaveLength(1);
    expect(drainRefusals('b', [database()], p, [agent('a', { drainingAt: 1 }), ...agents.slice(1), agent('e')], NOW)).toEqual([]);
    // A host holding nothing drains at once; deleted databases do not count.
    expect(drainRefusals('d', [database()], p, agents, NOW)).toEqual([]);
    expect(drainRefusals('a', [database({ deleting: true })], p, agents.slice(0, 3), NOW)).toEqual([]);
    expect(membersOn('a', [database()], p)).toBe(1);
    expect(membersOn('a', [database({ deleting: true })], p)).toBe(0);
  });

  it('moves replicas first, then switches the primary over, then moves the old primary', () => {
    const none = () => false;
    const draining = new Set(['a']);
    const reports = [report(1, 'a'), report(2, 'b'), report(3, 'c')];
    // Primary (member 1) on the draining host: the others are running replicas elsewhere.
    expect(drainStep('a', database(), placed(['a', 'b', 'c']), reports, draining, none)).toEqual({ kind: 'switchover' });
    // A replica on the draining host moves first.
    expect(drainStep('b', database(), placed(['a', 'b', 'c']), reports, new Set(['b']), none)).toEqual({ kind: 'move', member: 2 });
    // After the switchover (member 2 primary), the old primary is a replica and moves.
    const after = [report(1, 'a', { role: 'replica' }), report(2, 'b', { role: 'primary' }), report(3, 'c')];
    expect(drainStep('a', database({ primaryMember: 2 }), placed(['a', 'b', 'c']), after, draining, none)).toEqual({ kind: 'move', member: 1 });
  });

  it('waits while another member is on its way, the primary does not serve, or another member is on a draining host', () => {
    const draining = new Set(['a']);
    const reports = [report(1, 'a'), report(2, 'b'), report(3, 'd')];
    expect(drainStep('a', database(), placed(['a', 'b', '']), reports, draining, () => false).kind).toBe('wait');
    expect(drainStep('a', database(), placed(['a', 'b', 'd']), reports, draining, (k) => k === 3).kind).toBe('wait');
    expect(drainStep('a', database(), placed(['a', 'b', 'd']), [report(1, 'a'), report(2, 'b')], draining, () => false).kind).toBe('wait');
    expect(drainStep('a', database(), placed(['a', 'b', 'd']), reports, new Set(['a', 'b']), () => false).kind).toBe('wait');
    expect(drainStep('b', database(), placed(['a', 'b', 'd']), [report(1, 'a', { role: 'fenced' }), report(2, 'b'), report(3, 'd')], new Set(['b']), () => false).kind).toBe('wait');
    expect(drainStep('a', database({ runState: 'suspended' }), placed(['a', 'b', 'd']), reports, draining, () => false).kind).toBe('wait');
  });

  it('moves a 1-node database through the object store: refused without a store, a key or another host on that store', () => {
    const one = database({ id: 8, label: 'one', clusterSize: 1, backupKey: 'k' });
    const p = [{ databaseId: 8, member: 1, agentId: 'a' }];
    const stored = [agent('a', { backupStore: 's3://b/x' }), agent('b', { backupStore: 's3://b/x' })];
    expect(drainRefusals('a', [one], p, stored, NOW)).toEqual([]);
    expect(moveTarget(one, stored[0]!, stored, new Map(), NOW)).toBe('b');
    const [noStore] = drainRefusals('a', [one], p, [agent('a'), agent('b')], NOW);
    expect(noStore).toMatch(/database 8 \(one\) is a 1-node database and this host has no backup store: .* a drain needs one/);
    expect(drainRefusals('a', [database({ ...one, backupKey: null })], p, stored, NOW)[0]).toMatch(/cannot be rebuilt on another host: its agent never reported the key/);
    // The other host on another store, draining, lost, silent or in another region does not count.
    for (const b of [agent('b', { backupStore: 's3://b/y' }), agent('b', { backupStore: 's3://b/x', drainingAt: 1 }), agent('b', { backupStore: 's3://b/x', lostAt: 1 }),
      agent('b', { backupStore: 's3://b/x', lastSeen: NOW - 60_000 }), agent('b', { backupStore: 's3://b/x', region: 'eu-west' })]) {
      expect(drainRefusals('a', [one], p, [stored[0]!, b], NOW)[0]).toMatch(/database 8 \(one\) has no other host to go to: .*shares this host's object store/);
    }
    // The drain's step: relocate, unless it is not running or already being rebuilt.
    const r = [report(1, 'a', { databaseId: 8 })];
    expect(drainStep('a', one, p, r, new Set(['a']), () => false)).toEqual({ kind: 'relocate' });
    expect(drainStep('a', database({ ...one, recovery: { from: 'a', lostMs: 1, placedMs: 1, planned: true } }), p, r, new Set(['a']), () => false).kind).toBe('wait');
    expect(drainStep('a', one, p, [report(1, 'a', { databaseId: 8, state: 'stopped' })], new Set(['a']), () => false).kind).toBe('wait');
    expect(drainStep('a', database({ ...one, runState: 'suspended' }), p, r, new Set(['a']), () => false).kind).toBe('wait');
    // The move goes on only while the database is still that running node at the term it was fenced at.
    expect(stillOn(one, p, 'a', 4)).toBe(true);
    for (const x of [database({ ...one, term: 5 }), database({ ...one, agentId: 'b' }), database({ ...one, clusterSize: 3 }), database({ ...one, recovery: { from: 'a', lostMs: 1 } })]) {
      expect(stillOn(x, p, 'a', 4)).toBe(false);
    }
  });

  it('places nothing new on a draining host', () => {
    expect(replacementAgent({ id: 7, region: 'us-east' }, placed(['a', 'b', '']), [agent('a'), agent('b'), agent('c', { drainingAt: 1 })], new Map(), NOW)).toBeUndefined();
  });
});
