import { describe, expect, it } from 'vitest';
import { buildNodeSpec, type NodeSpecInput } from '../../../agent/database/node-spec.js';

/**
 * A member's server_id comes from the desired state (docs/databases.md, "A re-placed member's
 * server_id"); without one (an older control plane, or a database on one agent) it is the index.
 */
describe('buildNodeSpec', () => {
  const input = (members: { index: number; serverId: number }[]): NodeSpecInput => ({
    agentId: 'ag', agentKey: 'abc123', databaseId: 9, dir: '/nowhere', semiSync: true, spread: true,
    desired: { engineId: 'mysql/10.11', members, type: { memoryMb: 1024, vcpus: 1 }, sslConnection: true, encrypted: false, restartOptions: {} },
    state: { running: { version: '10.11', binary: '/usr/sbin/mariadbd' }, addresses: ['10.0.0.1', '10.0.0.2', '10.0.0.3'], adminPassword: 'a', replPassword: 'r' },
    tls: { caPem: 'ca', serverCertPem: 'cert', serverKeyPem: 'key' },
  }) as unknown as NodeSpecInput;

  it('renders the server_id the control plane gave the member, the index otherwise', () => {
    const members = [{ index: 1, serverId: 1 }, { index: 2, serverId: 4 }, { index: 3, serverId: 0 }];
    const ids = [1, 2, 3].map((k) => /server_id=(\d+)\n/.exec(buildNodeSpec(input(members), k).config)?.[1]);
    expect(ids).toEqual(['1', '4', '3']);
    expect(/server_id=(\d+)\n/.exec(buildNodeSpec(input([]), 2).config)?.[1]).toBe('2');
    expect(buildNodeSpec(input(members), 2).config).toContain('log_basename=db9-n2');
  });
});
