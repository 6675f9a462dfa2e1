import { describe, expect, it } from 'vitest';
import { endpointRoutes } from '../../../control-plane/domain/databases/endpoint-routes.js';
import { endpointsOf } from '../../../control-plane/push/endpoint-builder.js';
import { DataplaneSources, peerAddress } from '../../../control-plane/push/dataplane-sources.js';
import { validateSnapshot } from '../../../dataplane/config/validate.js';
import { proxyNetworks, sameNetworks } from '../../../agent/database/endpoints.js';

describe('endpointRoutes (which member is the primary and where it listens)', () => {
  it('routes hosts.primary to the reported primary and hosts.secondary to the replicas', () => {
    const r = endpointRoutes({ members: { '10.0.0.3': 'failover', '10.0.0.1': 'primary', '10.0.0.2': 'failover' } });
    expect(r.primary).toEqual({ host: '10.0.0.1', port: 3306 });
    expect(r.secondaries).toEqual([{ host: '10.0.0.2', port: 3306 }, { host: '10.0.0.3', port: 3306 }]);
  });
  it('without replicas hosts.secondary leads to the primary; without a primary nothing is routed', () => {
    expect(endpointRoutes({ members: { '10.0.0.1': 'primary' } }).secondaries).toEqual([{ host: '10.0.0.1', port: 3306 }]);
    expect(endpointRoutes({ members: {} })).toEqual({ secondaries: [] });
    expect(endpointRoutes({ members: { '10.0.0.2': 'failover' } })).toEqual({ secondaries: [] });
  });
  it('routes nobody while a restore rewrites the data', () => {
    expect(endpointRoutes({ members: { '10.0.0.1': 'primary' } }, true)).toEqual({ secondaries: [] });
  });
  it('builds both endpoints with the allow_list and the TLS rule', () => {
    const eps = endpointsOf({ id: 7, hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', port: 3306, allowList: ['10.0.0.0/8'], sslConnection: true, members: { '127.79.0.1': 'primary' } });
    expect(eps).toEqual([
      { databaseId: 7, role: 'primary', address: '127.78.0.1', port: 3306, allowList: ['10.0.0.0/8'], requireTls: true, targets: [{ host: '127.79.0.1', port: 3306 }] },
      { databaseId: 7, role: 'secondary', address: '127.78.0.2', port: 3306, allowList: ['10.0.0.0/8'], requireTls: true, targets: [{ host: '127.79.0.1', port: 3306 }] },
    ]);
  });
});

describe('database endpoints in a data plane snapshot', () => {
  const ep = { databaseId: 1, role: 'primary', address: '127.78.0.1', port: 3306, allowList: ['0.0.0.0/0'], targets: [{ host: '127.79.0.1', port: 3306 }] };
  it('accepts a well-formed endpoint', () => {
    const s = validateSnapshot({ version: 1, databaseEndpoints: [ep] });
    expect(s.databaseEndpoints[0]).toMatchObject({ databaseId: 1, listenKey: '127.78.0.1:3306', targets: [{ host: '127.79.0.1', port: 3306 }] });
  });
  it('refuses the whole snapshot naming every bad field, and an address a NodeBalancer already uses', () => {
    const bad = { databaseId: 0, role: 'leader', address: 'x', port: 0, allowList: ['nope'], targets: [{ host: 'h', port: 70000 }] };
    const nb = { id: 1, ipv4: '127.78.0.1', configs: [{ id: 1, port: 3306, protocol: 'tcp' }] };
    let msg = '';
    try {
      validateSnapshot({ version: 1, nodebalancers: [nb], databaseEndpoints: [bad, ep] });
    } catch (e) {
      msg = JSON.stringify(e);
    }
    for (const f of ['database_endpoints[0].database_id', 'database_endpoints[0].role', 'database_endpoints[0].address', 'database_endpoints[0].port',
      'database_endpoints[0].allow_list[0]', 'database_endpoints[0].targets[0].host', 'database_endpoints[0].targets[0].port', 'database_endpoints[1].port']) {
      expect(msg).toContain(f);
    }
  });
});

describe('proxy_protocol_networks and data plane source addresses', () => {
  it('is the Unix socket plus the data planes, sorted, unique, IPv4 only', () => {
    expect(proxyNetworks([])).toBe('localhost');
    expect(proxyNetworks(['10.0.0.2', '10.0.0.1', '10.0.0.2', 'evil,0.0.0.0/0'])).toBe('localhost,10.0.0.1,10.0.0.2');
    expect(sameNetworks('localhost, 10.0.0.2,10.0.0.1', 'localhost,10.0.0.1,10.0.0.2')).toBe(true);
    expect(sameNetworks('localhost', 'localhost,10.0.0.1')).toBe(false);
  });
  it('takes the IPv4 address of a stream peer', () => {
    expect(peerAddress('127.0.0.1:5000')).toBe('127.0.0.1');
    expect(peerAddress('[::ffff:198.18.0.5]:5000')).toBe('198.18.0.5');
    expect(peerAddress('ipv4:198.18.0.6:1')).toBe('198.18.0.6');
    expect(peerAddress('[::1]:5000')).toBeUndefined();
  });
});

describe('DataplaneSources', () => {
  const kv = () => {
    const m = new Map<string, string>();
    return { get: async (k: string) => m.get(k), set: async (k: string, v: string) => void m.set(k, v) };
  };
  it('prefers the claimed address, falls back to the peer, serves regions, survives a restart, forgets revoked ones', async () => {
    const store = kv();
    let changes = 0;
    const s = new DataplaneSources(store, () => changes++);
    await s.load();
    await s.record('dp1', 'us-east', '198.18.0.10', '198.18.0.99:4000');
    await s.record('dp2', '*', '', '[::ffff:198.18.0.11]:4000');
    await s.record('dp3', 'eu-west', 'not-an-ip', '198.18.0.12:4000');
    expect(s.forRegion('us-east')).toEqual(['198.18.0.10', '198.18.0.11']);
    expect(s.forRegion('eu-west')).toEqual(['198.18.0.11', '198.18.0.12']);
    await s.record('dp1', 'us-east', '198.18.0.10', '198.18.0.99:4001');
    expect(changes).toBe(3);
    const again = new DataplaneSources(store, () => undefined);
    await again.load();
    await again.forget('dp2');
    expect(again.forRegion('us-east')).toEqual(['198.18.0.10']);
  });
  it('two replicas sharing the record keep what each other recorded (no lost update)', async () => {
    const store = kv();
    const a = new DataplaneSources(store, () => undefined);
    const b = new DataplaneSources(store, () => undefined);
    await a.load();
    await b.load();
    await a.record('dp1', 'r', '198.18.0.10', '');
    await b.record('dp2', 'r', '198.18.0.11', '');
    // A's copy predates dp2: its next change must not write dp2 away.
    await a.record('dp1', 'r', '198.18.0.12', '');
    await a.forget('dp9');
    const fresh = new DataplaneSources(store, () => undefined);
    await fresh.load();
    expect(fresh.forRegion('r')).toEqual(['198.18.0.11', '198.18.0.12']);
    expect(a.forRegion('r')).toEqual(['198.18.0.11', '198.18.0.12']);
    // B hears of the change (a replica notice) and re-reads.
    await b.load();
    expect(b.forRegion('r')).toEqual(['198.18.0.11', '198.18.0.12']);
    await b.forget('dp1');
    await a.load();
    expect(a.forRegion('r')).toEqual(['198.18.0.11']);
  });
  it('keeps at most 1,000 data planes, dropping the oldest', async () => {
    const s = new DataplaneSources(kv(), () => undefined);
    for (let i = 0; i < 1005; i++) await s.record(`dp${i}`, 'r', `10.0.${Math.floor(i / 250)}.${(i % 250) + 1}`, '');
    const all = s.forRegion('r');
    expect(all).toHaveLength(1000);
    expect(all).not.toContain('10.0.0.1');
    expect(all).toContain('10.0.4.5');
  });
});
