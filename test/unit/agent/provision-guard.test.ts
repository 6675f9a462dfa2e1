import { describe, expect, it } from 'vitest';
import { provision, type ProvisionContext } from '../../../agent/database/provision.js';
import { newDbState } from '../../../agent/database/state.js';

/**
 * An agent runs only its local members of a cluster spread over agents (docs/databases.md,
 * "Clusters across hosts"), with the CA and replication password the control plane shares; a
 * spread cluster without them is refused before anything is allocated or started.
 */
describe('provisioning a cluster spread over agents', () => {
  const members = [{ index: 1, agentId: 'a', local: false }, { index: 2, agentId: 'b', local: true }, { index: 3, agentId: 'c', local: false }];
  const spec = (over: Record<string, unknown> = {}) => ({
    hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', clusterSize: 3, members: members.map((m) => ({ ...m, address: '' })),
    term: 1, primaryMember: 1, clusterCaPem: 'CA', clusterCaKeyPem: 'KEY', replicationPassword: 'shared', ...over,
  });
  // Anything past the guard would touch these: a call fails the test.
  const untouchable = new Proxy({}, { get: (_t, key) => { throw new Error(`provision used ${String(key)}`); } });

  it('is refused without the control plane\'s CA or replication password', async () => {
    const db = { spec: spec({ replicationPassword: '' }), spread: true, state: untouchable } as unknown as ProvisionContext;
    await expect(provision(db)).rejects.toThrow('the control plane sent no CA or replication password for this cluster spread over agents');
    const noCa = { spec: spec({ clusterCaPem: '' }), spread: true, state: untouchable } as unknown as ProvisionContext;
    await expect(provision(noCa)).rejects.toThrow('no CA or replication password');
  });

  it('gives addresses to the local members only, with the shared replication password and the named primary', async () => {
    const state = newDbState(7);
    const allocated: number[] = [];
    const db = {
      spec: spec({ term: 4, primaryMember: 3 }), spread: true, state,
      nodeIndexes: () => [2],
      allocateAddresses: async (n: number) => {
        allocated.push(n);
        return ['198.18.162.9'];
      },
      resolveEngine: () => ({ binary: '/usr/sbin/mariadbd', version: '10.11' }),
      save: async () => undefined,
      ensureTls: async () => {
        throw new Error('stop here');
      },
    } as unknown as ProvisionContext;
    await expect(provision(db)).rejects.toThrow('stop here');
    expect(allocated).toEqual([1]);
    expect(state.addresses).toEqual(['', '198.18.162.9', '']);
    expect(state.replPassword).toBe('shared');
    expect([state.primary, state.term]).toEqual([3, 4]);
  });

  it('a cluster on one agent goes the usual way', async () => {
    const db = { spec: spec({ members: [1, 2, 3].map((index) => ({ index, agentId: 'a', local: true, address: '' })) }), spread: false, state: untouchable } as unknown as ProvisionContext;
    await expect(provision(db)).rejects.toThrow('provision used addresses');
  });
});
