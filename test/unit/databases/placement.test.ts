import { describe, expect, it } from 'vitest';
import { forkAgent, memberAgents, placeDatabases, servesRegion, spansAgents } from '../../../control-plane/domain/databases/placement.js';
import type { DatabaseRepository } from '../../../control-plane/domain/databases/repository.js';
import type { MemberPlacement } from '../../../control-plane/domain/databases/model.js';

type Row = { id: number; region: string; agentId: string | null; deleting?: boolean; clusterSize?: 1 | 3; fork?: { source: number; restoreTimeMs: number }; backupKey?: string };

/** Placement over an in-memory list (the repository port is the seam). */
function repoOf(rows: Row[], placements: MemberPlacement[] = [], stores: Record<string, string> = {}): DatabaseRepository {
  return {
    agent: (id: string) => (id in stores ? { id, backupStore: stores[id] } : undefined),
    list: () => rows.map((r) => ({ deleting: false, clusterSize: 1, ...r })),
    get: (id: number) => rows.find((r) => r.id === id),
    update: (id: number, patch: { agentId: string }) => {
      rows.find((r) => r.id === id)!.agentId = patch.agentId;
    },
    members: () => placements,
    setMembers: (databaseId: number, agents: string[]) => {
      agents.forEach((agentId, k) => placements.push({ databaseId, member: k + 1, agentId }));
    },
  } as unknown as DatabaseRepository;
}

describe('placement of databases on agents', () => {
  it('puts each unplaced database on the least loaded agent of its region, ties by id, and keeps placed ones', async () => {
    const rows = [
      { id: 1, region: 'us-east', agentId: 'b' },
      { id: 2, region: 'us-east', agentId: null },
      { id: 3, region: 'us-east', agentId: null },
      { id: 4, region: 'eu-west', agentId: null },
      { id: 5, region: 'us-east', agentId: null, deleting: true },
    ];
    const placed = await placeDatabases(repoOf(rows), [{ id: 'b', region: 'us-east' }, { id: 'a', region: 'us-east' }]);
    expect(placed).toEqual([{ database: 2, agent: 'a', members: ['a'] }, { database: 3, agent: 'a', members: ['a'] }]);
    expect(rows.map((r) => r.agentId)).toEqual(['b', 'a', 'a', null, null]);
  });

  it('lets an agent without a region (or `*`) serve every region', async () => {
    expect(servesRegion('', 'eu-west')).toBe(true);
    expect(servesRegion('*', 'eu-west')).toBe(true);
    expect(servesRegion('us-east', 'eu-west')).toBe(false);
    const rows = [{ id: 1, region: 'eu-west', agentId: null }];
    expect(await placeDatabases(repoOf(rows), [{ id: 'x', region: '' }])).toEqual([{ database: 1, agent: 'x', members: ['x'] }]);
  });
});

describe('anti-affinity of cluster members', () => {
  const spread = (id: string) => ({ id, region: 'us-east', membersAcrossHosts: true });

  it('puts the three members of a cluster on three different agents when three can take them', async () => {
    expect(memberAgents(3, [spread('a'), spread('b'), spread('c'), spread('d')])).toEqual(['a', 'b', 'c']);
  });

  it('falls back to fewer distinct agents only when fewer are connected, wrapping round them', async () => {
    expect(memberAgents(3, [spread('a'), spread('b')])).toEqual(['a', 'b', 'a']);
    expect(memberAgents(3, [spread('a')])).toEqual(['a', 'a', 'a']);
  });

  it('keeps every member on one agent when the agents cannot run part of a cluster (the lab, older agents)', async () => {
    expect(memberAgents(3, [{ id: 'a', region: '' }, { id: 'b', region: '' }, { id: 'c', region: '' }])).toEqual(['a', 'a', 'a']);
    // Only agents that can spread are spread over; one such agent alone is no spread.
    expect(memberAgents(3, [{ id: 'a', region: '' }, spread('b')])).toEqual(['a', 'a', 'a']);
    expect(memberAgents(1, [spread('a'), spread('b')])).toEqual(['a']);
  });

  it('places a 3-node cluster over the least loaded agents, stores every member and never moves them', async () => {
    const placements: MemberPlacement[] = [{ databaseId: 1, member: 1, agentId: 'a' }];
    const rows: Row[] = [
      { id: 1, region: 'us-east', agentId: 'a', clusterSize: 1 },
      { id: 2, region: 'us-east', agentId: null, clusterSize: 3 },
    ];
    const repo = repoOf(rows, placements);
    const agents = [spread('a'), spread('b'), spread('c'), spread('d')];
    expect(await placeDatabases(repo, agents)).toEqual([{ database: 2, agent: 'b', members: ['b', 'c', 'd'] }]);
    expect(placements.filter((m) => m.databaseId === 2).map((m) => [m.member, m.agentId])).toEqual([[1, 'b'], [2, 'c'], [3, 'd']]);
    expect(rows[1]!.agentId).toBe('b');
    expect(spansAgents(placements.filter((m) => m.databaseId === 2))).toBe(true);
    // A second round (say after agent b went away) places nothing again.
    expect(await placeDatabases(repo, [spread('a'), spread('c')])).toEqual([]);
    expect(placements.filter((m) => m.databaseId === 2).map((m) => m.agentId)).toEqual(['b', 'c', 'd']);
  });
  it('puts every member of a fork on the agent of its source (its backups and binlogs are there), waiting while that agent is away', async () => {
    const placements: MemberPlacement[] = [];
    const rows: Row[] = [
      { id: 1, region: 'us-east', agentId: 'c' },
      { id: 2, region: 'us-east', agentId: null, clusterSize: 3, fork: { source: 1, restoreTimeMs: 0 } },
    ];
    const repo = repoOf(rows, placements);
    expect(await placeDatabases(repo, [spread('a'), spread('b')])).toEqual([]);
    expect(await placeDatabases(repo, [spread('a'), spread('b'), spread('c')])).toEqual([{ database: 2, agent: 'c', members: ['c', 'c', 'c'] }]);
    expect(rows[1]!.agentId).toBe('c');
  });
});

/**
 * Forks from a shared object store (docs/databases.md, "Fork to a point in time"): the source's
 * agent while it is connected; when it is away and the control plane holds the source's key, the
 * least loaded connected agent of the region on the source agent's store.
 */
describe('placement of a fork when agents share a backup store', () => {
  const S3 = 's3:https://store.example:8443/backups/fulcrum/';
  const OTHER = 's3:https://other/backups/fulcrum/';
  const at = (id: string, backupStore = '', region = 'us-east') => ({ id, region, backupStore });
  const load = (id: string) => ({ a: 2, b: 1, c: 0, d: 0 } as Record<string, number>)[id] ?? 0;

  it('keeps the source\'s agent while it is connected, even on a shared store with a less loaded agent', () => {
    const agents = [at('c', S3), at('b', S3), at('a', S3)];
    expect(forkAgent({ agentId: 'a', backupStore: S3 }, agents, agents, load, true)).toBe('a');
    expect(forkAgent({ agentId: 'a', backupStore: '' }, [at('b'), at('a')], [at('b'), at('a')], load, true)).toBe('a');
  });

  it('with the source\'s agent away, picks the least loaded agent on its store, never one on another store', () => {
    const src = { agentId: 'a', backupStore: S3 };
    const agents = [at('c', OTHER), at('b', S3), at('d', S3)];
    expect(forkAgent(src, agents, agents, load, true)).toBe('d');
    expect(forkAgent(src, [at('c', OTHER)], [at('c', OTHER)], load, true)).toBeNull();
  });

  it('waits for the source\'s agent without a shared store or without the source\'s key', () => {
    expect(forkAgent({ agentId: 'a', backupStore: '' }, [at('b')], [at('b')], load, true)).toBeNull();
    expect(forkAgent({ agentId: 'a', backupStore: S3 }, [at('b', S3)], [at('b', S3)], load, false)).toBeNull();
  });

  it('places a fork whose source key the control plane holds on another agent of the store when the source\'s agent is away, members together', async () => {
    const placements: MemberPlacement[] = [{ databaseId: 1, member: 1, agentId: 'a' }];
    const rows: Row[] = [
      { id: 1, region: 'us-east', agentId: 'a', backupKey: 'k' },
      { id: 2, region: 'us-east', agentId: null, clusterSize: 3, fork: { source: 1, restoreTimeMs: 0 } },
    ];
    const repo = repoOf(rows, placements, { a: S3, b: S3 });
    expect(await placeDatabases(repo, [at('b', S3), at('c')])).toEqual([{ database: 2, agent: 'b', members: ['b', 'b', 'b'] }]);
    // Without the key it waits for the source's agent.
    const rows2: Row[] = [{ ...rows[0]!, backupKey: undefined }, { ...rows[1]!, agentId: null }];
    expect(await placeDatabases(repoOf(rows2, [{ databaseId: 1, member: 1, agentId: 'a' }], { a: S3, b: S3 }), [at('b', S3)])).toEqual([]);
  });
});
