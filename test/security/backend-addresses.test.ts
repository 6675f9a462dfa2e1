import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';

/**
 * A tenant (a restricted user with `add_nodebalancers`) tries to point a NodeBalancer's backends
 * at what is not theirs: the cloud metadata address, the control plane's own gRPC and API ports,
 * the unspecified address, multicast, broadcast, reserved space, and Fulcrum's own service pools
 * (NodeBalancer addresses, database endpoints). A backend there would turn health checks into a
 * port scanner and the data plane into a proxy to the operator's services. Every such write is a
 * 400 naming the `address` field; an address inside the operator's backend networks is accepted
 * (docs/security/api.md).
 *
 * Two real control planes with real sockets: one with the product default (no backend networks
 * configured) and one configured as the lab is (loopback allowed, its own services still not).
 */

type Attempt = { address: string; why: string };

async function tenant(api: ApiHarness): Promise<{ token: string; nb: number; cfg: number; node: number }> {
  const token = await api.userToken('tenant', { restricted: true, grants: { global: { add_nodebalancers: true } } });
  const nb = await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east', label: 'tenant-nb' } });
  expect(nb.status).toBe(200);
  const cfg = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs`, { token, body: { port: 80, protocol: 'tcp' } });
  expect(cfg.status).toBe(200);
  const node = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs/${cfg.body.id}/nodes`, { token, body: { address: '10.20.0.5:80', label: 'ok-node' } });
  expect(node.status).toBe(200);
  return { token, nb: nb.body.id, cfg: cfg.body.id, node: node.body.id };
}

/** Every write that takes a node address, each expected to be refused naming the address field. */
async function expectRefused(api: ApiHarness, t: { token: string; nb: number; cfg: number; node: number }, a: Attempt): Promise<void> {
  const before = api.snapshot();
  const base = `/v4/nodebalancers/${t.nb}/configs/${t.cfg}`;
  const attempts: [string, string, unknown, string][] = [
    ['POST', `${base}/nodes`, { address: a.address, label: 'evil-node' }, 'address'],
    ['PUT', `${base}/nodes/${t.node}`, { address: a.address }, 'address'],
    ['POST', `${base}/rebuild`, { port: 80, protocol: 'tcp', nodes: [{ address: a.address, label: 'evil-node' }] }, 'nodes[0].address'],
    ['POST', `${base}/rebuild`, { port: 80, protocol: 'tcp', nodes: [{ id: t.node, address: a.address, label: 'ok-node' }] }, 'nodes[0].address'],
    ['POST', '/v4/nodebalancers', { region: 'us-east', configs: [{ port: 81, protocol: 'tcp', nodes: [{ address: '10.20.0.6:80', label: 'fine' }, { address: a.address, label: 'evil-node' }] }] }, 'configs[0].nodes[1].address'],
  ];
  for (const [method, path, body, field] of attempts) {
    const r = await api.req(method, path, { token: t.token, body });
    expect(r.status, `${a.why}: ${method} ${path}`).toBe(400);
    expect(r.body.errors, `${a.why}: ${method} ${path}`).toEqual([{ field, reason: expect.stringMatching(/not allowed/) }]);
  }
  expect(api.snapshot(), a.why).toBe(before);
}

describe('backend (node) addresses are restricted to the operator\'s backend networks', () => {
  describe('product default (no backend networks configured)', () => {
    let api: ApiHarness;
    let t: Awaited<ReturnType<typeof tenant>>;
    beforeAll(async () => {
      // The harness's permissive test setting is replaced by the product default: none given.
      api = await startApi({ backendNetworks: undefined });
      t = await tenant(api);
    });
    afterAll(() => api?.close());

    it('refuses metadata, loopback (gRPC and API ports included), 0/8, multicast, broadcast, reserved and the service pools', async () => {
      const grpcPort = Number(api.cp.grpcAddress.split(':')[1]);
      const apiPort = Number(new URL(api.url).port);
      const nbIp = (await api.req('GET', `/v4/nodebalancers/${t.nb}`, { token: t.token })).body.ipv4 as string;
      const refused: Attempt[] = [
        { address: '169.254.169.254:80', why: 'link-local metadata' },
        { address: `127.0.0.1:${grpcPort}`, why: 'control plane gRPC' },
        { address: `127.0.0.1:${apiPort}`, why: 'control plane API' },
        { address: '127.0.0.1:22', why: 'loopback' },
        { address: '0.0.0.0:80', why: 'unspecified' },
        { address: '0.1.2.3:80', why: '0/8' },
        { address: '224.0.0.1:80', why: 'multicast' },
        { address: '239.255.255.250:1900', why: 'multicast (SSDP)' },
        { address: '255.255.255.255:80', why: 'broadcast' },
        { address: '240.0.0.1:80', why: 'reserved' },
        { address: `${nbIp}:80`, why: 'its own NodeBalancer address (pool)' },
        { address: '127.77.200.9:80', why: 'NodeBalancer pool' },
        { address: '127.78.0.10:3306', why: 'database endpoint pool' },
      ];
      for (const a of refused) await expectRefused(api, t, a);
    });

    it('accepts ordinary private and public backends', async () => {
      for (const address of ['10.0.0.5:8080', '192.168.128.47:80', '172.16.3.4:443', '203.0.113.7:443']) {
        const r = await api.req('POST', `/v4/nodebalancers/${t.nb}/configs/${t.cfg}/nodes`, { token: t.token, body: { address, label: `n-${address.replace(/[.:]/g, '-')}` } });
        expect(r.status, address).toBe(200);
      }
    });
  });

  describe('the lab\'s setting: loopback backends allowed, its own services still refused', () => {
    let api: ApiHarness;
    let t: Awaited<ReturnType<typeof tenant>>;
    beforeAll(async () => {
      api = await startApi({ backendNetworks: ['127.0.0.0/8', '10.0.0.0/8'], backendExcluded: ['127.79.0.0/16'] });
      t = await tenant(api);
    });
    afterAll(() => api?.close());

    it('refuses the control plane\'s own ports, the pools, excluded networks and what lies outside the networks', async () => {
      const grpcPort = Number(api.cp.grpcAddress.split(':')[1]);
      const apiPort = Number(new URL(api.url).port);
      const refused: Attempt[] = [
        { address: `127.0.0.1:${grpcPort}`, why: 'control plane gRPC' },
        { address: `127.0.0.1:${apiPort}`, why: 'control plane API' },
        { address: '127.77.0.2:80', why: 'NodeBalancer pool' },
        { address: '127.78.0.2:3306', why: 'database endpoint pool' },
        { address: '127.79.0.1:3306', why: 'excluded: database nodes' },
        { address: '169.254.169.254:80', why: 'link-local metadata' },
        { address: '192.168.1.10:80', why: 'outside the backend networks' },
        { address: '0.0.0.0:80', why: 'unspecified' },
      ];
      for (const a of refused) await expectRefused(api, t, a);
    });

    it('accepts addresses inside the configured backend networks', async () => {
      for (const address of ['127.0.0.1:9000', '127.0.5.1:8080', '10.9.8.7:80']) {
        const r = await api.req('POST', `/v4/nodebalancers/${t.nb}/configs/${t.cfg}/nodes`, { token: t.token, body: { address, label: `n-${address.replace(/[.:]/g, '-')}` } });
        expect(r.status, address).toBe(200);
      }
      const nb = await api.req('POST', '/v4/nodebalancers', { token: t.token, body: { region: 'us-east', configs: [{ port: 80, protocol: 'tcp', nodes: [{ address: '127.0.0.1:9001', label: 'lo-node' }] }] } });
      expect(nb.status).toBe(200);
    });
  });
});
