import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { acknowledge, type SeedAckContext } from '../../../agent/database/seed-ack.js';

/**
 * The acknowledge action checks the desired state again before it touches the server: the plan's
 * observation may be older than a desired state that marks the member seeding again (a new
 * placement). The server is never reached here while the mark is on; what the action does on a
 * real server is in test/integration/agent/fence-order.test.ts.
 */
describe('turning a seeded member acknowledging', () => {
  const context = (seeding: boolean | undefined): SeedAckContext & { reached: number } => {
    const db = {
      reached: 0,
      state: { primary: 1, seeding: [{ node: 3, until: '0-1-40' }] },
      spec: { members: [{ index: 1, local: false }, { index: 3, local: true, ...(seeding === undefined ? {} : { seeding }) }] },
      semiSync: true, spread: true, log: silentLogger(),
      nodeIndexes: () => [3],
      adminTarget: async () => {
        db.reached++;
        throw new Error('the server is reached');
      },
      primaryBinlogState: async () => '0-1-40',
      save: async () => undefined,
    };
    return db as unknown as SeedAckContext & { reached: number };
  };

  it('does nothing while the desired state marks the member seeding, and goes to the server once it does not', async () => {
    const marked = context(true);
    await acknowledge(marked, 3);
    expect(marked.reached).toBe(0);
    expect(marked.state.seeding).toEqual([{ node: 3, until: '0-1-40' }]);
    for (const mark of [false, undefined]) {
      const cleared = context(mark);
      await expect(acknowledge(cleared, 3)).rejects.toThrow('the server is reached');
      expect(cleared.reached).toBe(1);
    }
  });
});
