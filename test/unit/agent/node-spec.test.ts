import { createHash } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { buildNodeSpec, type NodeSpecInput } from '../../../agent/database/node-spec.js';
import { sameSpec } from '../../../agent/runtime/container-runtime.js';
import { specHash } from '../../../agent/runtime/docker-container.js';

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

  /**
   * A member that (re)starts accepts the data planes' PROXY headers from its first connection
   * (docs/databases.md, "Who may send PROXY headers to a member"): before, it started with
   * `localhost` only and refused every client the data planes sent it until the agent's next
   * SET GLOBAL, seconds later in a rolling restart.
   */
  const withSources = (sources: string[]): NodeSpecInput => {
    const i = input([]);
    return { ...i, desired: { ...i.desired, proxySources: sources } } as NodeSpecInput;
  };

  it('starts a member with the data planes\' addresses in proxy_protocol_networks', () => {
    expect(buildNodeSpec(withSources(['127.76.9.1', '10.1.0.2', 'not-an-address']), 1).config).toContain('\nproxy_protocol_networks=localhost,10.1.0.2,127.76.9.1\n');
    expect(buildNodeSpec(withSources([]), 1).config).toContain('\nproxy_protocol_networks=localhost\n');
  });

  it('restarts no member when only the data planes\' addresses change, and keeps the docker spec hash of nodes made before', () => {
    const before = buildNodeSpec(withSources([]), 2);
    const after = buildNodeSpec(withSources(['127.76.9.1']), 2);
    expect(after.config).not.toBe(before.config);
    expect(sameSpec(before, after)).toBe(true);
    expect(specHash(after)).toBe(specHash(before));
    // The hash as it was computed before the addresses were written into the config.
    const sorted = (o: Record<string, string>) => Object.fromEntries(Object.entries(o).sort(([a], [b]) => a.localeCompare(b)));
    const old = createHash('sha256').update(JSON.stringify({ ...before, labels: sorted(before.labels), files: sorted(before.files), engine: { ...before.engine } })).digest('hex').slice(0, 32);
    expect(specHash(after)).toBe(old);
    // Any other change is still one.
    const bigger = buildNodeSpec({ ...withSources(['127.76.9.1']), desired: { ...withSources([]).desired, type: { memoryMb: 2048, vcpus: 1 } } } as NodeSpecInput, 2);
    expect(sameSpec(before, bigger)).toBe(false);
    expect(specHash(bigger)).not.toBe(specHash(before));
  });
});
