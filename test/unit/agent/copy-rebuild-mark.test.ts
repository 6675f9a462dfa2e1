import { describe, expect, it, vi } from 'vitest';

// The servers are mocked: this tests rejoin's order of steps around a copy of the primary
// (docs/multi-host.md, "How a new member is seeded"), not the copy (test/integration/agent/copy-seed.test.ts).
vi.mock('../../../agent/mysql/admin.js', async (orig) => ({
  ...(await orig<typeof import('../../../agent/mysql/admin.js')>()),
  withAdmin: async (_t: unknown, fn: (c: unknown) => Promise<unknown>) => fn({ query: async () => [[]] }),
  // A member just placed: it has applied nothing.
  q: async (_c: unknown, sql: string) => (sql.includes('gtid_current_pos AS c') ? [{ c: '', b: '', s: '' }] : []),
  secureRoot: async () => undefined,
}));
vi.mock('../../../agent/mysql/accounts.js', async (orig) => ({
  ...(await orig<typeof import('../../../agent/mysql/accounts.js')>()),
  ensureReplicationUser: async () => undefined,
}));
vi.mock('../../../agent/mysql/replication.js', async (orig) => ({
  ...(await orig<typeof import('../../../agent/mysql/replication.js')>()),
  configureReplica: async () => undefined,
  gtidCurrentPos: async () => '',
  // The primary refuses the binlog the member needs from the first GTID.
  replicaStatus: async () => ({ masterHost: '10.0.0.1', ioRunning: false, sqlRunning: true, secondsBehind: null, lastError: 'Got fatal error 1236 from master', gtidIoPos: '' }),
}));
vi.mock('../../../agent/database/diverged.js', () => ({ divergedFromPrimary: async () => false }));
vi.mock('../../../agent/database/seed-ack.js', async (orig) => ({
  ...(await orig<typeof import('../../../agent/database/seed-ack.js')>()),
  holdAcks: async () => undefined,
}));
const copy = vi.hoisted(() => ({ seenRebuild: [] as number[][], savedRebuild: [] as number[][] }));
vi.mock('../../../agent/database/dump-seed.js', async (orig) => ({
  ...(await orig<typeof import('../../../agent/database/dump-seed.js')>()),
  seedFromPrimaryCopy: async () => {
    copy.seenRebuild.push([...copy.savedRebuild.at(-1) ?? []]);
    throw new Error('dumping the primary failed: Lost connection to server during query');
  },
}));

const { rejoin, SeedUnavailableError } = await import('../../../agent/database/rejoin.js');

describe('a member seeded by a copy of the primary', () => {
  it('is saved as to be rebuilt before the copy loads anything, so that a copy cut short (and a wipe that failed) is wiped by the next try', async () => {
    const state = { id: 1, term: 1, primary: 1, rebuild: [] as number[], addresses: ['10.0.0.1', '10.0.0.2', '10.0.0.3'], adminPassword: 'a', replPassword: 'r' };
    const db = {
      state, semiSync: false, spread: true, dir: '/nonexistent', spec: { term: 1, primaryMember: 1 },
      log: { info: () => undefined, warn: () => undefined, error: () => undefined },
      adminTarget: async () => ({ socketPath: '/nonexistent.sock', password: 'a' }),
      primaryAddress: () => '10.0.0.1',
      primaryBinlogState: async () => '0-1-50',
      nodeIndexes: () => [2],
      nodeName: (k: number) => `n${k}`,
      nodeSpec: (k: number) => ({ name: `n${k}` }),
      runtime: {
        inspect: async () => ({ state: 'running' }),
        ensure: async () => ({ state: 'running' }),
        // The wipe after the failed copy fails too (as an agent killed mid-copy never wipes).
        remove: async () => { throw new Error('docker: no such container'); },
      },
      ensureTls: async () => undefined,
      linrootPassword: () => 'l',
      save: async () => { copy.savedRebuild.push([...state.rebuild]); },
      refresh: async () => undefined,
      emit: vi.fn(),
      primaryReadOnly: async () => false,
      remotePrimary: () => ({ host: '10.0.0.1', port: 3306, password: 'r', caPem: 'ca' }),
    };
    await expect(rejoin(db as never, 2, false)).rejects.toBeInstanceOf(SeedUnavailableError);
    // Saved with the mark when the copy began, and still marked after it failed: the plan's next
    // rejoin is a rebuild, which wipes the node before anything is loaded again.
    expect(copy.seenRebuild).toEqual([[2]]);
    expect(state.rebuild).toEqual([2]);
    expect(copy.savedRebuild.at(-1)).toEqual([2]);
    expect(db.emit).toHaveBeenCalledWith('database_update', expect.stringMatching(/^node 2 cannot be seeded: .*copying the primary failed \(dumping the primary failed: Lost connection/), 'failed');
  });
});
