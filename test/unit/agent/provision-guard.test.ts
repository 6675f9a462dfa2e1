import { describe, expect, it } from 'vitest';
import { provision, type ProvisionContext } from '../../../agent/database/provision.js';

/**
 * This agent runs whole clusters only: a desired cluster with a member placed on another agent is
 * refused before anything is allocated or started (docs/databases.md, "Clusters across hosts").
 */
describe('provisioning a cluster spread over agents', () => {
  const spec = (members: { index: number; agentId: string; local: boolean }[]) => ({
    hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', clusterSize: 3, members: members.map((m) => ({ ...m, address: '' })),
  });
  // Anything past the guard would touch these: a call fails the test.
  const untouchable = new Proxy({}, { get: (_t, key) => { throw new Error(`provision used ${String(key)}`); } });

  it('is refused, naming the members placed elsewhere', async () => {
    const db = { spec: spec([{ index: 1, agentId: 'a', local: true }, { index: 2, agentId: 'b', local: false }, { index: 3, agentId: 'c', local: false }]), state: untouchable } as unknown as ProvisionContext;
    await expect(provision(db)).rejects.toThrow('this agent runs whole clusters only; member 2 is placed on agent b, member 3 is placed on agent c');
  });

  it('goes ahead when every member is local (the control plane placed the whole cluster here)', async () => {
    const db = { spec: spec([1, 2, 3].map((index) => ({ index, agentId: 'a', local: true }))), state: untouchable } as unknown as ProvisionContext;
    await expect(provision(db)).rejects.toThrow('provision used addresses');
  });
});
