import { mkdtempSync, rmSync } from 'node:fs';
import { enrolHost } from '../../helpers/fleet.js';
import { createConnection } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { loopback, startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';

/**
 * Issue 3 acceptance 4 and 5 with real traffic: the control plane in-process, a real data plane
 * (startDataplane) fed over gRPC, and TCP backends on their own 127.x addresses. A rebuild is
 * seen by new connections (a removed node gets none, an added one does), a rejected rebuild
 * changes neither the store nor the traffic, and deleting the NodeBalancer closes its listener
 * and releases its address.
 */
function greeting(host: string, port: number): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ host, port });
    const timer = setTimeout(() => (sock.destroy(), reject(new Error('timeout'))), 3000);
    let buf = '';
    sock.on('data', (d) => {
      buf += d.toString();
      const nl = buf.indexOf('\n');
      if (nl >= 0) {
        clearTimeout(timer);
        sock.destroy();
        resolve(buf.slice(0, nl));
      }
    });
    sock.on('error', (e) => (clearTimeout(timer), reject(e)));
    sock.on('close', () => (clearTimeout(timer), reject(new Error('closed before greeting'))));
  });
}

async function names(host: string, port: number, n: number): Promise<string[]> {
  const out: string[] = [];
  for (let i = 0; i < n; i++) out.push(await greeting(host, port));
  return out;
}

describe('rebuild and delete as seen by traffic', () => {
  let api: ApiHarness;
  let dp: Dataplane;
  let dpState: string;
  const backends: Record<string, TcpBackend> = {};
  // A pool of our own so that parallel suites never hand out the same address.
  const pool = `127.${170 + Math.floor(Math.random() * 20)}.${1 + Math.floor(Math.random() * 250)}.0/24`;
  const port = 7400;
  let nb: { id: number; ipv4: string };
  let cfgId: number;

  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: pool });
    dpState = mkdtempSync(join(tmpdir(), 'fulcrum-dp-'));
    await enrolHost(api.cp, dpState, 'dataplane', 'dp-rebuild', 'us-east');
    dp = await startDataplane({ id: 'dp-rebuild', region: 'us-east', controlPlane: api.cp.grpcAddress, stateDir: dpState, logger: silentLogger(), telemetryIntervalMs: 200 });
    for (const name of ['alpha', 'beta', 'gamma']) backends[name] = await startTcpBackend(name, { ip: loopback() });
  });
  afterAll(async () => {
    await dp?.close();
    await api?.close();
    await Promise.all(Object.values(backends).map((b) => b.close()));
    if (dpState) rmSync(dpState, { recursive: true, force: true });
  });

  it('serves the nodes of the created config', async () => {
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: {
        region: 'us-east', label: 'traffic-nb',
        configs: [{ port, protocol: 'tcp', algorithm: 'roundrobin', nodes: ['alpha', 'beta'].map((n) => ({ label: n, address: backends[n]!.address })) }],
      },
    });
    expect(res.status).toBe(200);
    nb = res.body;
    cfgId = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs`)).body.data[0].id;
    await waitFor(() => greeting(nb.ipv4, port), 10_000, 'the NodeBalancer listener');
    const seen = await names(nb.ipv4, port, 6);
    expect(new Set(seen)).toEqual(new Set(['alpha', 'beta']));
  });

  it('after a rebuild, the removed node gets no new connections and the added one does', async () => {
    const nodes = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/nodes`)).body.data;
    const alpha = nodes.find((n: any) => n.label === 'alpha');
    const r = await api.req('POST', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/rebuild`, {
      body: { port, protocol: 'tcp', nodes: [{ id: alpha.id, label: 'alpha', address: backends.alpha!.address }, { label: 'gamma', address: backends.gamma!.address }] },
    });
    expect(r.status).toBe(200);
    // Wait until the data plane has the new set, then count.
    await waitFor(async () => (await names(nb.ipv4, port, 4)).includes('gamma'), 10_000, 'gamma receiving connections');
    const betaBefore = backends.beta!.connections;
    const gammaBefore = backends.gamma!.connections;
    const seen = await names(nb.ipv4, port, 20);
    expect(new Set(seen)).toEqual(new Set(['alpha', 'gamma']));
    expect(backends.beta!.connections).toBe(betaBefore);
    expect(backends.gamma!.connections).toBeGreaterThanOrEqual(gammaBefore + 9);
  });

  it('a rebuild that fails validation changes neither the store nor the traffic', async () => {
    const before = api.snapshot();
    const versionBefore = (await api.req('GET', '/v4/fulcrum/dataplanes')).body.data[0].versionApplied;
    const r = await api.req('POST', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/rebuild`, {
      body: { port, protocol: 'tcp', nodes: [{ label: 'beta', address: backends.beta!.address }, { label: 'broken', address: 'not-an-address' }] },
    });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([{ field: 'nodes[1].address', reason: 'Must be a valid IPv4 address followed by :port' }]);
    expect(api.snapshot()).toBe(before);
    const betaBefore = backends.beta!.connections;
    const seen = await names(nb.ipv4, port, 10);
    expect(new Set(seen)).toEqual(new Set(['alpha', 'gamma']));
    expect(backends.beta!.connections).toBe(betaBefore);
    expect((await api.req('GET', '/v4/fulcrum/dataplanes')).body.data[0].versionApplied).toBe(versionBefore);
  });

  it('node and config changes reach the traffic too', async () => {
    const nodes = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/nodes`)).body.data;
    const gamma = nodes.find((n: any) => n.label === 'gamma');
    expect((await api.req('PUT', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/nodes/${gamma.id}`, { body: { mode: 'reject' } })).status).toBe(200);
    await waitFor(async () => (await names(nb.ipv4, port, 4)).every((n) => n === 'alpha'), 10_000, 'gamma rejected');
    const added = await api.req('POST', `/v4/nodebalancers/${nb.id}/configs/${cfgId}/nodes`, { body: { label: 'beta-again', address: backends.beta!.address } });
    expect(added.status).toBe(200);
    await waitFor(async () => (await names(nb.ipv4, port, 4)).includes('beta'), 10_000, 'beta added back');
    const moved = await api.req('PUT', `/v4/nodebalancers/${nb.id}/configs/${cfgId}`, { body: { port: port + 1 } });
    expect(moved.status).toBe(200);
    await waitFor(() => greeting(nb.ipv4, port + 1), 10_000, 'listener on the new port');
    await waitFor(() => greeting(nb.ipv4, port).then(() => false, () => true), 10_000, 'old port closed');
  });

  it('deleting the NodeBalancer closes its listener and releases its address', async () => {
    expect((await api.req('DELETE', `/v4/nodebalancers/${nb.id}`)).status).toBe(200);
    await waitFor(() => greeting(nb.ipv4, port + 1).then(() => false, (e: NodeJS.ErrnoException) => e.code === 'ECONNREFUSED'), 10_000, 'listener closed');
    const next = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', configs: [{ port: port + 2, protocol: 'tcp', nodes: [{ label: 'alpha', address: backends.alpha!.address }] }] } });
    expect(next.body.ipv4).toBe(nb.ipv4);
    expect(next.body.id).toBeGreaterThan(nb.id);
    await waitFor(() => greeting(nb.ipv4, port + 2), 10_000, 'listener of the new NodeBalancer on the reused address');
    expect(await greeting(nb.ipv4, port + 2)).toBe('alpha');
  });
});
