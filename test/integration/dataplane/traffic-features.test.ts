import { Agent } from 'node:http';
import { describe, expect, it } from 'vitest';
import { loopback, startHttpBackend, startTcpBackend, waitFor, type HttpBackend, type TcpBackend } from '../../helpers/backends.js';
import { cleanup, serveOneConfig } from './engine-harness.js';
import { node, snapshot } from './snapshot.js';
import { greeting, tcpConnect } from './clients.js';
import { get } from './http-client.js';

describe('stickiness', () => {
  it('table: 200 connections from one IP reach one node; after it goes down the client moves and stays', async () => {
    const backends: TcpBackend[] = [];
    for (const n of ['a', 'b', 'c']) backends.push(await startTcpBackend(n));
    for (const b of backends) cleanup.push(() => b.close());
    const { ip, port } = await serveOneConfig(backends.map((b) => node(b.address)), { stickiness: 'table', checkPassive: true });
    const client = loopback();
    const first = await greeting(ip, port, client);
    for (let i = 0; i < 199; i++) expect(await greeting(ip, port, client)).toBe(first);
    // Another client IP is balanced on its own (roundrobin moves on).
    const other = await greeting(ip, port, loopback());
    expect(['a', 'b', 'c']).toContain(other);
    await backends.find((b) => b.name === first)!.kill();
    const moved = await greeting(ip, port, client);
    expect(moved).not.toBe(first);
    expect(moved).not.toBe('');
    for (let i = 0; i < 20; i++) expect(await greeting(ip, port, client)).toBe(moved);
  });

  it('http_cookie: NB_SRVID keeps a client on its node, clients without it are balanced, rewritten when its node is down', async () => {
    const backends: HttpBackend[] = [];
    for (const n of ['a', 'b']) backends.push(await startHttpBackend(n));
    for (const b of backends) cleanup.push(() => b.close());
    const { ip, port } = await serveOneConfig(backends.map((b) => node(b.address)), { protocol: 'http', stickiness: 'http_cookie' });
    const url = `http://${ip}:${port}/`;
    const r0 = await get(url);
    const setCookie = r0.headers['set-cookie']![0];
    expect(setCookie).toMatch(/^NB_SRVID=[0-9a-f]{16}; path=\/$/);
    // The value names the node without revealing its address.
    expect(setCookie).not.toContain(backends[0].ip);
    expect(setCookie).not.toContain(String(backends[0].port));
    const cookie = setCookie.split(';')[0];
    const home = r0.body.toString();
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    cleanup.push(() => agent.destroy());
    for (let i = 0; i < 100; i++) {
      const r = await get(url, { agent, headers: { cookie: `theme=dark; ${cookie}` } });
      expect(r.body.toString()).toBe(home);
      // Honoured: not set again.
      expect(r.headers['set-cookie']).toBeUndefined();
    }
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) seen.add((await get(url)).body.toString());
    expect(seen).toEqual(new Set(['a', 'b']));
    await backends.find((b) => b.name === home)!.kill();
    const moved = await get(url, { headers: { cookie } });
    expect(moved.status).toBe(200);
    expect(moved.body.toString()).not.toBe(home);
    const rewritten = moved.headers['set-cookie']![0].split(';')[0];
    expect(rewritten).not.toBe(cookie);
    for (let i = 0; i < 5; i++) expect((await get(url, { headers: { cookie: rewritten } })).body.toString()).toBe(moved.body.toString());
  });

  it('drain: only clients pinned to the node reach it', async () => {
    const backends: HttpBackend[] = [];
    for (const n of ['a', 'b']) backends.push(await startHttpBackend(n));
    for (const b of backends) cleanup.push(() => b.close());
    const nodes = backends.map((b) => node(b.address));
    const { ip, port, engine, nb } = await serveOneConfig(nodes, { protocol: 'http', stickiness: 'http_cookie' });
    const url = `http://${ip}:${port}/`;
    let cookieA = '';
    while (!cookieA) {
      const r = await get(url);
      if (r.body.toString() === 'a') cookieA = r.headers['set-cookie']![0].split(';')[0];
    }
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...nb.configs![0], nodes: [{ ...nodes[0], mode: 'drain' }, nodes[1]] }] }]));
    for (let i = 0; i < 5; i++) expect((await get(url, { headers: { cookie: cookieA } })).body.toString()).toBe('a');
    for (let i = 0; i < 6; i++) expect((await get(url)).body.toString()).toBe('b');
  });
});

describe('client_conn_throttle', () => {
  it('with 5/s a client opening 50 connections in a second gets 5 (+-1) through; another IP gets all 3', async () => {
    const b = await startTcpBackend('t');
    cleanup.push(() => b.close());
    const { ip, port } = await serveOneConfig([node(b.address)], {}, { clientConnThrottle: 5 });
    const noisy = loopback();
    const results = await Promise.all(Array.from({ length: 50 }, () => greeting(ip, port, noisy).catch(() => '')));
    const ok = results.filter((r) => r === 't').length;
    expect(ok).toBeGreaterThanOrEqual(4);
    expect(ok).toBeLessThanOrEqual(6);
    const quiet = loopback();
    const q = await Promise.all(Array.from({ length: 3 }, () => greeting(ip, port, quiet).catch(() => '')));
    expect(q).toEqual(['t', 't', 't']);
  });
});

describe('PROXY protocol', () => {
  for (const version of ['v1', 'v2'] as const) {
    it(`${version}: the backend reads the true client address and port, and connection checks send a valid header`, async () => {
      const b = await startTcpBackend('pp', { expectProxy: true });
      cleanup.push(() => b.close());
      const { ip, port } = await serveOneConfig([node(b.address)], { proxyProtocol: version, check: 'connection', checkInterval: 30, checkTimeout: 2 });
      // The connection check's header (v2: LOCAL; v1: the check socket's own endpoints).
      await waitFor(() => b.proxyHeaders.length >= 1, 5000, 'health check header');
      const check = b.proxyHeaders[0];
      expect(check.command).toBe(version === 'v2' ? 'LOCAL' : 'PROXY');
      const client = loopback();
      const s = await tcpConnect(ip, port, client);
      s.write('ping');
      let echoed = '';
      s.on('data', (d: Buffer) => (echoed += d));
      await waitFor(() => echoed === 'pp\nping', 5000, 'echo after header');
      const h = b.proxyHeaders[b.proxyHeaders.length - 1];
      expect(h).toMatchObject({ version: version === 'v1' ? 1 : 2, command: 'PROXY', family: 'TCP4', srcIp: client, srcPort: s.localPort, dstIp: ip, dstPort: port });
      s.destroy();
    });
  }
});
