import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { waitFor } from '../../helpers/backends.js';
import { enrolHost } from '../../helpers/fleet.js';
import { commonTcpPort, startHealthPort, startTcpPort, startUdpEcho, udpLoopback, UdpFlow, type UdpEcho } from '../../helpers/udp.js';

/**
 * A udp config end to end: created through the API, pushed over gRPC to a real data plane, served
 * to real UDP clients, checked on its udp_check_port (node status UP through telemetry), its
 * throttle changed by an update, and its datagrams counted into `transfer`.
 */
/** Polls of the API are spaced out: it answers 429 to a client that asks every few ms. */
const pause = () => new Promise((r) => setTimeout(r, 300));

describe('a udp NodeBalancer from the API to the data plane', () => {
  let api: ApiHarness;
  let dp: Dataplane;
  let dpState: string;
  const backends: UdpEcho[] = [];
  const closers: Array<{ close(): Promise<void> }> = [];
  const flows: UdpFlow[] = [];
  // Not 127.117/16, where udpLoopback puts the backends: a node inside the pool is refused (400).
  const pool = `127.116.${1 + Math.floor(Math.random() * 250)}.0/24`;
  const port = 5353;
  let checkPort: number;
  let nb: { id: number; ipv4: string };

  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: pool });
    dpState = mkdtempSync(join(tmpdir(), 'fulcrum-udp-dp-'));
    await enrolHost(api.cp, dpState, 'dataplane', 'dp-udp', 'us-east');
    dp = await startDataplane({ id: 'dp-udp', region: 'us-east', controlPlane: api.cp.grpcAddress, stateDir: dpState, logger: silentLogger(), telemetryIntervalMs: 200 });
    const ips = [udpLoopback(), udpLoopback()];
    for (const [i, ip] of ips.entries()) backends.push(await startUdpEcho(['alpha', 'beta'][i]!, ip));
    checkPort = await commonTcpPort(ips);
    for (const ip of ips) closers.push(await startTcpPort(ip, checkPort));
  });
  afterAll(async () => {
    for (const f of flows) f.close();
    await dp?.close();
    await api?.close();
    await Promise.all([...backends, ...closers].map((b) => b.close()));
    if (dpState) rmSync(dpState, { recursive: true, force: true });
  });

  const flow = () => {
    const f = new UdpFlow(nb.ipv4, port);
    flows.push(f);
    return f;
  };

  it('serves a udp config created through the API, with nodes UP from their udp_check_port check', async () => {
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: {
        region: 'us-east', label: 'udp-traffic', type: 'premium',
        configs: [{
          port, protocol: 'udp', algorithm: 'roundrobin', check: 'connection', check_interval: 2, check_timeout: 1, check_attempts: 2,
          udp_check_port: checkPort, nodes: backends.map((b) => ({ label: b.name, address: b.address })),
        }],
      },
    });
    expect(res.status).toBe(200);
    nb = res.body;
    const f = flow();
    await waitFor(() => f.who('hello', 500), 15_000, 'the udp listener');
    const seen = new Set<string | null>();
    for (let i = 0; i < 6; i++) seen.add(await flow().who());
    expect(seen).toEqual(new Set(['alpha', 'beta']));
    const cfg = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs`)).body.data[0];
    await waitFor(async () => {
      await pause();
      const nodes = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${cfg.id}/nodes`)).body.data;
      return nodes.every((n: { status: string }) => n.status === 'UP');
    }, 20_000, 'both nodes UP through telemetry');
  });

  it('applies a client_udp_sess_throttle update to new sessions', async () => {
    expect((await api.req('PUT', `/v4/nodebalancers/${nb.id}`, { body: { client_udp_sess_throttle: 2 } })).status).toBe(200);
    const burst = async () => {
      const fs = Array.from({ length: 5 }, flow);
      await Promise.all(fs.map((x) => x.ready));
      const got = await Promise.all(fs.map((x) => x.ask('burst', 1500)));
      return got.filter((g) => g !== null).length;
    };
    // Bursts of five new flows are all answered until the data plane has the update.
    await waitFor(async () => (await burst()) < 5, 20_000, 'the throttle to refuse');
    // Then, in a second of its own, exactly two of five new flows are answered.
    await new Promise((r) => setTimeout(r, 1200));
    expect(await burst()).toBe(2);
  });

  it('takes an http check on udp_check_port through the API: a failing /health marks its node DOWN', async () => {
    const ips = backends.map((b) => b.ip);
    const httpPort = await commonTcpPort(ips);
    const health = await Promise.all(ips.map((ip) => startHealthPort(ip, httpPort)));
    closers.push(...health);
    health[1]!.status = 500;
    const cfg = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs`)).body.data[0];
    const put = await api.req('PUT', `/v4/nodebalancers/${nb.id}/configs/${cfg.id}`, {
      body: { check: 'http', check_path: '/health', udp_check_port: httpPort, check_interval: 2, check_timeout: 1, check_attempts: 1 },
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ protocol: 'udp', check: 'http', check_path: '/health', udp_check_port: httpPort });
    const statusOf = async () => {
      await pause();
      const nodes = (await api.req('GET', `/v4/nodebalancers/${nb.id}/configs/${cfg.id}/nodes`)).body.data as { label: string; status: string }[];
      return Object.fromEntries(nodes.map((n) => [n.label, n.status]));
    };
    // Both asked over HTTP (alpha may still show UP from the connection check before it).
    await waitFor(async () => {
      const s = await statusOf();
      return health.every((h) => h.hits > 0) && s.alpha === 'UP' && s.beta === 'DOWN';
    }, 30_000, 'beta DOWN by its http check, alpha UP');
    // New flows go to alpha only (two a second: the throttle set above is 2).
    for (let i = 0; i < 4; i++) {
      if (i % 2 === 0) await new Promise((r) => setTimeout(r, 1100));
      expect(await flow().who()).toBe('alpha');
    }
    health[1]!.status = 200;
    await waitFor(async () => (await statusOf()).beta === 'UP', 30_000, 'beta UP again');
  });

  it('counts the datagrams into transfer', async () => {
    // Enough bytes to show in MB with three decimals, over the first flow's live session.
    for (let i = 0; i < 40; i++) expect(await flows[0]!.ask('x'.repeat(1000))).not.toBeNull();
    await waitFor(async () => {
      await pause();
      const r = await api.req('GET', `/v4/nodebalancers/${nb.id}`);
      if (r.status !== 200) throw new Error(`GET ${r.status} ${JSON.stringify(r.body)}`);
      const t = r.body.transfer;
      return t.in !== null && t.in > 0 && t.out > 0;
    }, 20_000, 'transfer from telemetry');
  });
});
