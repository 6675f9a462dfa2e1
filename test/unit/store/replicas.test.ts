import { describe, expect, it } from 'vitest';
import { parseChange, singleReplica } from '../../../control-plane/store/replicas.js';

describe('replicas on a store with one process (SQLite)', () => {
  it('always holds the lease and has nobody to tell', async () => {
    const r = singleReplica();
    const heard: unknown[] = [];
    r.onChange((c) => heard.push(c));
    r.publish('nodebalancer', 7);
    expect(r.leaseHeld()).toBe(true);
    expect(heard).toEqual([]);
    await r.close();
    expect(r.leaseHeld()).toBe(true);
  });
});

describe('change notification payloads', () => {
  it('reads <kind>:<id> and ignores anything else', () => {
    expect(parseChange('nodebalancer:12')).toEqual({ kind: 'nodebalancer', id: 12 });
    expect(parseChange('database:0')).toEqual({ kind: 'database', id: 0 });
    expect(parseChange('all:0')).toEqual({ kind: 'all', id: 0 });
    expect(parseChange('removed:agent:db-host.1')).toEqual({ kind: 'removed', id: 0, host: { role: 'agent', id: 'db-host.1' } });
    for (const bad of [undefined, '', 'nodebalancer', 'nodebalancer:', 'users:1', 'all:-1', 'database:1:2', 'removed:root:x', 'removed:agent:', 'removed:agent:../x', `nodebalancer:${'9'.repeat(20)}`]) {
      expect(parseChange(bad)).toBeUndefined();
    }
  });
});
