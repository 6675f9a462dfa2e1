import { describe, expect, it } from 'vitest';
import { clusterIncomplete, hostState, replacementAgent } from '../../../control-plane/domain/databases/host-healing.js';
import type { AgentRecord, MemberReport } from '../../../control-plane/domain/databases/model.js';

const NOW = 1_000_000;
const agent = (id: string, o: Partial<AgentRecord> = {}): AgentRecord => ({
  id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: NOW - 1000, appliedVersion: 1, engines: [], lostAt: null, ...o,
});
const db = { id: 7, region: 'us-east' };
const placed = (agents: string[]) => agents.map((agentId, k) => ({ databaseId: 7, member: k + 1, agentId }));
const report = (member: number, agentId: string): MemberReport => ({ databaseId: 7, member, agentId, state: 'running', role: member === 1 ? 'primary' : 'replica', gtid: '0-1-5', address: `10.0.0.${member}:3306`, reported: 1 });

describe('host healing rules', () => {
  it('a host is lost once declared, else up while its stream is open, else unreachable', () => {
    expect(hostState(agent('a'))).toBe('up');
    expect(hostState(agent('a', { connected: false }))).toBe('unreachable');
    expect(hostState(agent('a', { connected: true, lostAt: 5 }))).toBe('lost');
    expect(hostState(agent('a', { lostAt: undefined }))).toBe('up');
  });

  it('re-places on a healthy agent of the region that holds no member of the database, least loaded first', () => {
    const agents = [
      agent('a'), agent('b'), agent('c'),
      agent('d-lost', { lostAt: 1 }), agent('e-down', { connected: false }), agent('f-silent', { lastSeen: NOW - 60_000 }),
      agent('g-other-region', { region: 'eu-west' }), agent('h-single', { membersAcrossHosts: false }),
      agent('y'), agent('z'),
    ];
    const load = new Map([['y', 3], ['z', 1]]);
    expect(replacementAgent(db, placed(['a', 'b', '']), agents, load, NOW)).toBe('c');
    expect(replacementAgent(db, placed(['a', 'b', 'c']), agents, load, NOW)).toBe('z');
    expect(replacementAgent(db, placed(['a', 'b', 'c']), agents.filter((x) => x.id !== 'y' && x.id !== 'z'), load, NOW)).toBeUndefined();
    // An agent serving every region ('*') may take it.
    expect(replacementAgent(db, placed(['a', 'b', 'c']), [...agents.slice(0, 3), agent('star', { region: '*' })], load, NOW)).toBe('star');
  });

  it('a spread cluster is incomplete while a member has no host, is on a lost one, or has not reported since it was placed', () => {
    const reports = [report(1, 'a'), report(2, 'b'), report(3, 'c')];
    expect(clusterIncomplete(placed(['a', 'b', 'c']), reports, new Set())).toBe(false);
    expect(clusterIncomplete(placed(['a', 'b', '']), reports, new Set())).toBe(true);
    expect(clusterIncomplete(placed(['a', 'b', 'c']), reports, new Set(['c']))).toBe(true);
    expect(clusterIncomplete(placed(['a', 'b', 'd']), reports, new Set())).toBe(true);
    // One agent running every member is not a spread cluster: nothing to say.
    expect(clusterIncomplete(placed(['a', 'a', 'a']), [], new Set())).toBe(false);
  });
});
