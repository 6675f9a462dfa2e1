import { describe, expect, it } from 'vitest';
import { placeDatabases, servesRegion } from '../../../control-plane/domain/databases/placement.js';
import type { DatabaseRepository } from '../../../control-plane/store/database-repository.js';

/** Placement over an in-memory list (the repository port is the seam). */
function repoOf(rows: { id: number; region: string; agentId: string | null; deleting?: boolean }[]): DatabaseRepository {
  return {
    list: () => rows.map((r) => ({ deleting: false, ...r })),
    update: (id: number, patch: { agentId: string }) => {
      rows.find((r) => r.id === id)!.agentId = patch.agentId;
    },
  } as unknown as DatabaseRepository;
}

describe('placement of databases on agents', () => {
  it('puts each unplaced database on the least loaded agent of its region, ties by id, and keeps placed ones', () => {
    const rows = [
      { id: 1, region: 'us-east', agentId: 'b' },
      { id: 2, region: 'us-east', agentId: null },
      { id: 3, region: 'us-east', agentId: null },
      { id: 4, region: 'eu-west', agentId: null },
      { id: 5, region: 'us-east', agentId: null, deleting: true },
    ];
    const placed = placeDatabases(repoOf(rows), [{ id: 'b', region: 'us-east' }, { id: 'a', region: 'us-east' }]);
    expect(placed).toEqual([{ database: 2, agent: 'a' }, { database: 3, agent: 'a' }]);
    expect(rows.map((r) => r.agentId)).toEqual(['b', 'a', 'a', null, null]);
  });

  it('lets an agent without a region (or `*`) serve every region', () => {
    expect(servesRegion('', 'eu-west')).toBe(true);
    expect(servesRegion('*', 'eu-west')).toBe(true);
    expect(servesRegion('us-east', 'eu-west')).toBe(false);
    const rows = [{ id: 1, region: 'eu-west', agentId: null }];
    expect(placeDatabases(repoOf(rows), [{ id: 'x', region: '' }])).toEqual([{ database: 1, agent: 'x' }]);
  });
});
