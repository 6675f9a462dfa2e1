import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { startHttpBackend, waitFor, type HttpBackend } from '../../helpers/backends.js';
import { enrolHost } from '../../helpers/fleet.js';
import { startUdpEcho, UdpFlow, type UdpEcho } from '../../helpers/udp.js';
import { get } from '../dataplane/http-client.js';

/**
 * A node's `status` says what something has seen: `unknown` until a check or real traffic
 * reached it (the spec's default), never UP just because the config has no active check. Served
 * by a real data plane over gRPC, the API read back through telemetry.
 */
/** Polls of the API are spaced out: it answers 429 to a client that asks every few ms. */
const pause = () => new Promise((r) => setTimeout(r, 300));

describe('node status with check none: unknown until seen', () => {
  let api: ApiHarness;
  let dp: Dataplane;
  let dpState: string;
  let live: HttpBackend;
  let echo: UdpEcho | undefined;
  const slot = 1 + Math.floor(Math.random() * 200);
  const pool = `127.63.${slot}.0/24`;
  // Nothing listens here: connections are refused at once.
  const dead = `127.63.${slot + 50}.9:9`;
  const port = 8080;
  let nbId: number;
  let cfgId: number;

  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: pool });
    dpState = mkdtempSync(join(tmpdir(), 'apf-node-status-dp-'));
    await enrolHost(api.cp, dpState, 'dataplane', 'apf-dp-status', 'us-east');
    dp = await startDataplane({ id: 'apf-dp-status', region: 'us-east', controlPlane: api.cp.grpcAddress, stateDir: dpState, logger: silentLogger(), telemetryIntervalMs: 200 });
    live = await startHttpBackend('live', `127.63.${slot + 50}.10`);
  });
  afterAll(async () => {
    await dp?.close();
    await api?.close();
    await live?.close();
    await echo?.close();
    if (dpState) rmSync(dpState, { recursive: true, force: true });
  });

  const nodes = async (): Promise<Record<string, string>> => {
    await pause();
    const data = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes`)).body.data as { label: string; status: string }[];
    return Object.fromEntries(data.map((n) => [n.label, n.status]));
  };

  it('stays unknown behind an unreachable address while no traffic or check has seen it', async () => {
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: {
        region: 'us-east', label: 'apf-status',
        configs: [{ port, protocol: 'http', check: 'none', check_passive: true, nodes: [{ label: 'dead', address: dead }, { label: 'live', address: live.address }] }],
      },
    });
    expect(res.status).toBe(200);
    nbId = res.body.id;
    cfgId = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs`)).body.data[0].id;
    // The data plane serves this config: its listener accepts a connection (closed at once,
    // before any request, so no backend is dialled).
    const ipv4 = res.body.ipv4 as string;
    await waitFor(() => new Promise<boolean>((resolve) => {
      const c = connect({ host: ipv4, port }, () => (c.destroy(), resolve(true)));
      c.on('error', () => resolve(false));
    }), 20_000, 'the listener');
    // Many telemetry rounds later, still nothing has seen either node.
    const until = Date.now() + 2500;
    while (Date.now() < until) expect(await nodes()).toEqual({ dead: 'unknown', live: 'unknown' });
    const cfg = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs/${cfgId}`)).body;
    expect(cfg.nodes_status).toEqual({ up: 0, down: 0 });
  });

  it('real traffic is what moves them: the node that answered is UP, the refusing one DOWN (passive)', async () => {
    for (let i = 0; i < 4; i++) {
      const r = await waitFor(async () => {
        const x = await get(`http://${(await api.req('GET', `/v4/nodebalancers/${nbId}`)).body.ipv4}:${port}/`).catch(() => undefined);
        return x?.status === 200 ? x : undefined;
      }, 10_000, 'a request through the NodeBalancer');
      expect(r.body.toString()).toBe('live');
    }
    await waitFor(async () => {
      const s = await nodes();
      return s.live === 'UP' && s.dead === 'DOWN';
    }, 10_000, 'live UP and dead DOWN through telemetry');
  });

  it('a node moved to a new address is unknown again until seen there', async () => {
    const list = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes`)).body.data as { id: number; label: string }[];
    const deadNode = list.find((n) => n.label === 'dead')!;
    const other = `127.63.${slot + 50}.11:9`;
    const put = await api.req('PUT', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes/${deadNode.id}`, { body: { address: other } });
    expect(put.status).toBe(200);
    expect(put.body.status).toBe('unknown');
    const until = Date.now() + 1500;
    while (Date.now() < until) expect((await nodes()).dead).toBe('unknown');
  });

  it('udp with check none: unknown until the node answers a datagram, then UP', async () => {
    echo = await startUdpEcho('udp-seen', `127.63.${slot + 50}.12`);
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: { region: 'us-east', label: 'apf-status-udp', configs: [{ port: 5300, protocol: 'udp', check: 'none', nodes: [{ label: 'echo', address: echo.address }] }] },
    });
    expect(res.status).toBe(200);
    const udpNb = res.body;
    const udpCfg = (await api.req('GET', `/v4/nodebalancers/${udpNb.id}/configs`)).body.data[0].id;
    const status = async () => {
      await pause();
      return (await api.req('GET', `/v4/nodebalancers/${udpNb.id}/configs/${udpCfg}/nodes`)).body.data[0].status as string;
    };
    const until = Date.now() + 1500;
    while (Date.now() < until) expect(await status()).toBe('unknown');
    const flow = new UdpFlow(udpNb.ipv4, 5300);
    try {
      expect(await waitFor(async () => (await flow.ask('hi', 500)) ?? undefined, 15_000, 'a udp answer')).toBe('udp-seen:hi');
    } finally {
      flow.close();
    }
    await waitFor(async () => (await status()) === 'UP', 10_000, 'UP after a reply');
  });
});
