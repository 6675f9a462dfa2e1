import { describe, expect, it } from 'vitest';
import { withForkDefaults } from '../../../control-plane/domain/databases/fork-request.js';

const src = { label: 'orders', engineId: 'mysql/8.0', type: 'g6-dedicated-2', clusterSize: 3, replicationType: 'semi_synch' };

describe('withForkDefaults (Cloud Manager\'s fork body)', () => {
  it('takes engine, type, cluster size and replication from the source and labels the fork', () => {
    const body = { fork: { source: 5 }, region: 'us-east', private_network: null };
    expect(withForkDefaults(body, src, () => false)).toEqual({
      ...body, engine: 'mysql/8.0', type: 'g6-dedicated-2', cluster_size: 3, replication_type: 'semi_synch', label: 'orders-fork',
    });
  });

  it('keeps what the body sends; a cluster size sent keeps the replication the body chose', () => {
    const out = withForkDefaults({ fork: { source: 5 }, region: 'us-east', label: 'mine', type: 'g6-nanode-1', cluster_size: 1 }, src, () => false);
    expect(out).toMatchObject({ label: 'mine', type: 'g6-nanode-1', cluster_size: 1, engine: 'mysql/8.0' });
    expect(out.replication_type).toBeUndefined();
  });

  it('fits 32 characters and numbers a taken label', () => {
    const long = { ...src, label: 'a'.repeat(32) };
    const taken = new Set([`${'a'.repeat(27)}-fork`, `${'a'.repeat(25)}-fork-2`]);
    const out = withForkDefaults({ fork: { source: 5 }, region: 'us-east' }, long, (l) => taken.has(l));
    expect(out.label).toBe(`${'a'.repeat(25)}-fork-3`);
    expect((out.label as string).length).toBe(32);
  });
});
