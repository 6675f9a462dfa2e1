import { mkdtempSync, rmSync } from 'node:fs';
import { availableParallelism, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { flagKind, parseFlags, type FlagSpec } from '../../../lib/args.js';
import { agentOptions, controlPlaneOptions, dataplaneOptions } from '../../../bin/commands.js';
import { agentFlags, commands, controlPlaneFlags, dataplaneFlags, usage } from '../../../bin/flags.js';

const dir = mkdtempSync(join(tmpdir(), 'fulcrum-cli-flags-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

/** The three processes' flags as they were written out before the specs (name -> kind). */
const before = {
  'control-plane': {
    state: 'string', 'api-host': 'string', 'api-port': 'number', 'grpc-host': 'string', 'grpc-port': 'number',
    'nodebalancer-pool': 'string', 'nodebalancer-ipv6-pool': 'string', 'database-pool': 'string', 'hostname-suffix': 'string', 'kek-file': 'string', 'host-lost-after': 'number',
    'api-cert': 'string', 'api-key': 'string', 'metrics-host': 'string', 'metrics-port': 'number',
    'api-rate-limit': 'number', 'api-stats-rate-limit': 'number', 'api-ip-rate-limit': 'number', 'client-ipv6-prefix': 'number',
    'backend-networks': 'string', 'backend-exclude': 'string', 'bootstrap-port': 'number', 'insecure-grpc': 'boolean', store: 'string',
    'api-insecure-listen': 'boolean', 'api-request-timeout': 'number', 'api-idle-timeout': 'number',
    'api-max-connections': 'number', 'api-max-connections-per-address': 'number',
    'bootstrap-max-connections': 'number', 'bootstrap-max-connections-per-address': 'number', 'bootstrap-rate-limit': 'number',
  },
  dataplane: {
    id: 'string', region: 'string', 'control-plane': 'string', state: 'string', 'metrics-host': 'string', 'metrics-port': 'number',
    nofile: 'number', 'max-conns-per-client': 'number', 'max-conns-per-client-total': 'number', 'max-conns-per-nodebalancer': 'number',
    'fd-reserve': 'number', 'tcp-idle-timeout': 'number', 'endpoint-source': 'string',
    'client-ipv6-prefix': 'number', 'udp-new-sessions-per-client': 'number',
    join: 'string', 'insecure-grpc': 'boolean',
    'vrrp-interface': 'string', 'vrrp-peers': 'string', 'vrrp-priority': 'number', 'vrrp-router-id': 'number',
    workers: 'number', distribution: 'string', 'drain-time': 'number', 'wildcard-listeners': 'boolean', 'worker-apply-timeout': 'number',
  },
  agent: {
    id: 'string', region: 'string', 'control-plane': 'string', state: 'string', runtime: 'string',
    'metrics-host': 'string', 'metrics-port': 'number', 'stop-nodes-on-exit': 'boolean', join: 'string', 'insecure-grpc': 'boolean', engines: 'string',
    'node-pool': 'string', 'backup-store': 'string', 'backup-store-endpoint': 'string', 'backup-store-region': 'string',
    'backup-store-path-style': 'boolean', 'backup-store-ca': 'string', 'backup-store-credentials': 'string',
    'backup-store-access-key-id': 'string', 'backup-store-secret-access-key': 'string', 'binlog-archive-interval': 'number',
  },
} as const;

const kinds = (spec: FlagSpec) => Object.fromEntries(Object.entries(spec).map(([k, f]) => [k, flagKind(f)]));

describe('CLI flags', () => {
  it('the three processes take the same flags, of the same kinds, as before', () => {
    expect(kinds(controlPlaneFlags)).toEqual(before['control-plane']);
    expect(kinds(dataplaneFlags)).toEqual(before.dataplane);
    expect(kinds(agentFlags)).toEqual(before.agent);
  });

  it('the parser refuses what it refused, with the same texts', () => {
    const spec = { state: 'string', port: 'number', on: 'boolean' } as const;
    expect(() => parseFlags(['--stat', 'x'], spec)).toThrow(/^unknown option --stat$/);
    expect(() => parseFlags(['--state'], spec)).toThrow(/^--state needs a value$/);
    expect(() => parseFlags(['--port', 'eighty'], spec)).toThrow(/^--port must be a non-negative integer$/);
    expect(() => parseFlags(['--port=-1'], spec)).toThrow(/^--port must be a non-negative integer$/);
    expect(() => parseFlags(['--port', '1.5'], spec)).toThrow(/^--port must be a non-negative integer$/);
    expect(() => parseFlags(['stray'], spec)).toThrow(/^unexpected argument: stray$/);
    expect(() => parseFlags(['-h'], spec)).toThrow(/^unexpected argument: -h$/);
    expect(() => parseFlags(['--'], spec)).toThrow(/^unknown option --$/);
    expect(parseFlags(['--state', '-x', '--port=8', '--on=false'], spec)).toEqual({ state: '-x', port: 8, on: false });
    expect(parseFlags(['--on', '--state=a=b', '--state', 'c'], spec)).toEqual({ on: true, state: 'c' });
    expect(parseFlags(['--on=yes'], spec)).toEqual({ on: true });
  });

  it('each process keeps its defaults', () => {
    const cp = controlPlaneOptions(['--state', dir]);
    expect([cp.apiPort, cp.grpcPort, cp.bootstrapPort, cp.apiInsecureListen, cp.apiHost, cp.store]).toEqual([8080, 8081, 8082, false, undefined, undefined]);
    expect(controlPlaneOptions(['--state', dir, '--grpc-port', '9000']).bootstrapPort).toBe(9001);
    const dp = dataplaneOptions(['--state', dir, '--control-plane', '127.0.0.1:8081']);
    expect([dp.workers, dp.distribution, dp.vrrp, dp.drainMs, dp.workerApplyTimeoutMs, dp.wildcardListeners]).toEqual([availableParallelism(), 'kernel', undefined, undefined, undefined, false]);
    expect(dataplaneOptions(['--state', dir, '--control-plane', 'x:1', '--vrrp-interface', 'eth0']).vrrp).toEqual({ iface: 'eth0', peers: [], priority: 100, routerId: 51 });
    const agent = agentOptions(['--state', dir, '--control-plane', '127.0.0.1:8081']);
    expect([agent.runtime, agent.nodeAddressPool, agent.stopNodesOnExit, agent.insecureGrpc]).toEqual(['process', undefined, false, false]);
  });

  it('each process refuses a bad value naming the flag, as before', () => {
    const cp = (...a: string[]) => () => controlPlaneOptions(['--state', dir, ...a]);
    expect(() => controlPlaneOptions([])).toThrow(/^--state is required$/);
    expect(cp('--api-cert', '/x')).toThrow(/^--api-cert and --api-key go together$/);
    expect(cp('--api-request-timeout', '0')).toThrow(/^--api-request-timeout must be 1 to 3600 seconds$/);
    expect(cp('--api-idle-timeout', '3601')).toThrow(/^--api-idle-timeout must be 1 to 3600 seconds$/);
    expect(cp('--client-ipv6-prefix', '129')).toThrow(/^--client-ipv6-prefix must be an integer from 1 to 128$/);
    expect(cp('--api-port', 'x')).toThrow(/^--api-port must be a non-negative integer$/);
    const dp = (...a: string[]) => () => dataplaneOptions(['--state', dir, '--control-plane', 'x:1', ...a]);
    expect(() => dataplaneOptions(['--state', dir])).toThrow(/^--control-plane is required$/);
    expect(() => dataplaneOptions(['--control-plane', 'x:1'])).toThrow(/^--state is required$/);
    expect(dp('--workers', '0')).toThrow(/^--workers must be an integer from 1 to 1024$/);
    expect(dp('--distribution', 'random')).toThrow(/^--distribution must be rr or kernel$/);
    expect(dp('--drain-time', '86401')).toThrow(/^--drain-time must be 0 to 86400 seconds$/);
    expect(dp('--worker-apply-timeout', '0')).toThrow(/^--worker-apply-timeout must be 1 to 3600 seconds$/);
    expect(dp('--vrrp-priority', '5')).toThrow(/^--vrrp-peers, --vrrp-priority and --vrrp-router-id need --vrrp-interface$/);
    expect(dp('--client-ipv6-prefix', '0')).toThrow(/^--client-ipv6-prefix must be an integer from 1 to 128$/);
    const agent = (...a: string[]) => () => agentOptions(['--state', dir, '--control-plane', 'x:1', ...a]);
    expect(agent('--runtime', 'vm')).toThrow(/^--runtime must be process or docker$/);
    expect(agent('--node-pool', '10.0.0.0/33')).toThrow(/^--node-pool must be an IPv4 CIDR such as 198.18.110.0\/28$/);
    expect(agent('--stop-nodes-on-exit=maybe', '--unknown')).toThrow(/^unknown option --unknown$/);
    for (const bad of ['0', '3601']) expect(agent('--binlog-archive-interval', bad)).toThrow(/^--binlog-archive-interval must be 1 to 3600 seconds$/);
    expect(agentOptions(['--state', dir, '--control-plane', 'x:1', '--binlog-archive-interval', '5']).binlogArchiveMs).toBe(5000);
    expect(agentOptions(['--state', dir, '--control-plane', 'x:1']).binlogArchiveMs).toBeUndefined();
  });

  it('the usage is made from the specs: every command and every flag, with its default', () => {
    const text = usage();
    // Each command's part: from its own line to the blank line after its flags.
    const part = (name: string) => text.slice(text.indexOf(`\n  ${name} `)).split('\n\n')[0]!.split('\n');
    for (const c of commands) {
      expect(text).toMatch(new RegExp(`^  ${c.name} `, 'm'));
      for (const [name, f] of Object.entries(c.flags)) {
        const line = part(c.name).find((l) => l.startsWith(`    --${name} `) || l === `    --${name}`);
        expect(line, `${c.name} --${name}`).toBeDefined();
        const dflt = typeof f === 'string' ? undefined : f.defaultText ?? f.default;
        if (dflt !== undefined) expect(line, `${c.name} --${name}`).toContain(`(default ${dflt})`);
      }
    }
    expect(text).toContain('--api-port N              the API\'s port (default 8080)');
  });
});
