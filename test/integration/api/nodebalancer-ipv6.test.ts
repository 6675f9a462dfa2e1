import { createSocket } from 'node:dgram';
import { mkdtempSync, rmSync } from 'node:fs';
import { request as httpsRequest } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { startHttpBackend, waitFor, type HttpBackend } from '../../helpers/backends.js';
import { makeCa, makeCert, type Pem } from '../../helpers/certs.js';
import { enrolHost } from '../../helpers/fleet.js';
import { freePort } from '../../helpers/tcp.js';
import { startUdpEcho, type UdpEcho } from '../../helpers/udp.js';
import { get } from '../dataplane/http-client.js';

/**
 * A NodeBalancer's `ipv6` comes from the operator's IPv6 pool, is shown as a plain address, and
 * the data plane serves every config on it as well as on `ipv4`: tcp, http, https and udp traffic
 * through the IPv6 address reaches the backends. The pool is `::1/128`, the one IPv6 loopback
 * address every Linux host can bind without changing its interfaces.
 */
const pause = () => new Promise((r) => setTimeout(r, 300));

/** One datagram to [ip]:port over udp6; the answer, or null within `timeoutMs`. */
function askUdp6(ip: string, port: number, msg: string, timeoutMs = 1000): Promise<string | null> {
  return new Promise((resolve) => {
    const s = createSocket('udp6');
    const done = (v: string | null) => {
      clearTimeout(t);
      s.close();
      resolve(v);
    };
    const t = setTimeout(() => done(null), timeoutMs);
    s.on('message', (m) => done(m.toString()));
    s.on('error', () => done(null));
    s.send(msg, port, ip);
  });
}

/** An https GET to [ip]:port trusting `ca` for `servername`. */
function getHttps(ip: string, port: number, ca: string, servername: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest({ host: ip, port, path: '/', ca, servername, agent: false }, (res) => {
      let body = '';
      res.on('data', (d) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

describe('NodeBalancer IPv6: from the pool to traffic on the address', () => {
  let api: ApiHarness;
  let dp: Dataplane;
  let dpState: string;
  let web: HttpBackend;
  let echo: UdpEcho;
  let ca: Pem;
  let pem: Pem;
  const ports = { tcp: 0, http: 0, https: 0, udp: 0 };
  let nb: { id: number; ipv4: string; ipv6: string | null };

  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: `127.63.${1 + Math.floor(Math.random() * 200)}.0/24`, nodebalancerIpv6Pool: '::1/128' });
    dpState = mkdtempSync(join(tmpdir(), 'apf-ipv6-dp-'));
    await enrolHost(api.cp, dpState, 'dataplane', 'apf-dp-ipv6', 'us-east');
    dp = await startDataplane({ id: 'apf-dp-ipv6', region: 'us-east', controlPlane: api.cp.grpcAddress, stateDir: dpState, logger: silentLogger(), telemetryIntervalMs: 200 });
    web = await startHttpBackend('v6-web', `127.63.${201 + Math.floor(Math.random() * 50)}.10`);
    echo = await startUdpEcho('v6-echo', `127.63.${201 + Math.floor(Math.random() * 50)}.11`);
    ca = makeCa();
    pem = makeCert(ca, 'v6.example.com');
    // Ports free on ::1 (shared by everyone on this host) now; the data plane binds them next.
    for (const k of ['tcp', 'http', 'https', 'udp'] as const) ports[k] = await freePort('::1');
  });
  afterAll(async () => {
    await dp?.close();
    await api?.close();
    await web?.close();
    await echo?.close();
    if (dpState) rmSync(dpState, { recursive: true, force: true });
  });

  it('gives a NodeBalancer an ipv6 address from the pool, shown without a prefix', async () => {
    const res = await api.req('POST', '/v4/nodebalancers', {
      body: {
        region: 'us-east', label: 'apf-v6',
        configs: [
          { port: ports.tcp, protocol: 'tcp', nodes: [{ label: 'web', address: web.address }] },
          { port: ports.http, protocol: 'http', nodes: [{ label: 'web', address: web.address }] },
          { port: ports.https, protocol: 'https', ssl_cert: pem.cert, ssl_key: pem.key, nodes: [{ label: 'web', address: web.address }] },
          { port: ports.udp, protocol: 'udp', nodes: [{ label: 'echo', address: echo.address }] },
        ],
      },
    });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    nb = res.body;
    expect(nb.ipv6).toBe('::1');
    expect((await api.req('GET', `/v4/nodebalancers/${nb.id}`)).body.ipv6).toBe('::1');
    // The pool holds one address: a second NodeBalancer is refused with a clear error.
    const second = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'apf-v6-2' } });
    expect(second.status).toBe(400);
    expect(second.body.errors[0].reason).toBe('No NodeBalancer IPv6 addresses are left in the pool');
  });

  it('serves tcp, http, https and udp on the ipv6 address as on ipv4', async () => {
    const ip6 = nb.ipv6!;
    await waitFor(() => new Promise<boolean>((resolve) => {
      const c = connect({ host: ip6, port: ports.http }, () => (c.destroy(), resolve(true)));
      c.on('error', () => resolve(false));
    }), 20_000, 'the ipv6 listener');
    expect((await get(`http://[${ip6}]:${ports.http}/`)).body.toString()).toBe('v6-web');
    expect((await get(`http://${nb.ipv4}:${ports.http}/`)).body.toString()).toBe('v6-web');
    // tcp: the bytes of an HTTP request pass through untouched.
    expect((await get(`http://[${ip6}]:${ports.tcp}/`)).body.toString()).toBe('v6-web');
    const tls = await getHttps(ip6, ports.https, ca.cert, 'v6.example.com');
    expect(tls).toEqual({ status: 200, body: 'v6-web' });
    const answer = await waitFor(async () => (await askUdp6(ip6, ports.udp, 'ping')) ?? undefined, 10_000, 'a udp answer over ipv6');
    expect(answer).toBe('v6-echo:ping');
  });

  it('frees the address with the NodeBalancer and stops listening on it', async () => {
    expect((await api.req('DELETE', `/v4/nodebalancers/${nb.id}`)).status).toBe(200);
    await waitFor(() => new Promise<boolean>((resolve) => {
      const c = connect({ host: '::1', port: ports.http }, () => (c.destroy(), resolve(false)));
      c.on('error', () => resolve(true));
    }), 20_000, 'the ipv6 listener closed');
    await pause();
    const again = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'apf-v6-3' } });
    expect(again.status).toBe(200);
    expect(again.body.ipv6).toBe('::1');
  });
});
