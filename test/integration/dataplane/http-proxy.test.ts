import { Agent, createServer as createHttpServer, request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { loopback, patternBytes, sha256, startHttpBackend, waitFor } from '../../helpers/backends.js';
import { cleanup, newEngine, serveOneConfig } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { get } from './http-client.js';
import { readAll, tcpConnect } from './clients.js';

async function httpSetup(names: string[], extra: Parameters<typeof config>[2] = {}, weights?: number[]) {
  const backends = await Promise.all(names.map((n) => startHttpBackend(n)));
  for (const b of backends) cleanup.push(() => b.close());
  const { ip, port, engine } = await serveOneConfig(backends.map((b, i) => node(b.address, { weight: weights?.[i] ?? 1 })), { protocol: 'http', ...extra });
  return { backends, ip, port, engine, url: `http://${ip}:${port}` };
}

describe('http proxy', () => {
  it('forwards requests, appends X-Forwarded-For, sets X-Forwarded-Proto, leaves Host untouched', async () => {
    const { backends, url } = await httpSetup(['a']);
    const client = loopback();
    const r = await get(`${url}/hello`, { localAddress: client, headers: { host: 'example.test:8080', 'x-forwarded-for': '203.0.113.9', 'x-forwarded-proto': 'gopher' } });
    expect(r.status).toBe(200);
    expect(r.body.toString()).toBe('a');
    const h = backends[0].lastHeaders!;
    expect(h.host).toBe('example.test:8080');
    expect(h['x-forwarded-for']).toBe(`203.0.113.9, ${client}`);
    expect(h['x-forwarded-proto']).toBe('http');
  });

  it('roundrobin with weights 1:3 over 400 requests gives 100:300 interleaved', async () => {
    const { backends, url } = await httpSetup(['w1', 'w3'], {}, [1, 3]);
    const agent = new Agent({ keepAlive: true, maxSockets: 4 });
    cleanup.push(() => agent.destroy());
    const order: string[] = [];
    for (let i = 0; i < 400; i++) order.push((await get(url, { agent })).body.toString());
    expect(backends[0].hits).toBeGreaterThanOrEqual(98);
    expect(backends[0].hits).toBeLessThanOrEqual(102);
    expect(backends[1].hits).toBe(400 - backends[0].hits);
    // Smooth: never more than 3 heavy picks in a row.
    expect(order.join(',')).not.toMatch(/(w3,){4}/);
  });

  it('serves 100 keep-alive requests on one client connection', async () => {
    const { url } = await httpSetup(['a', 'b']);
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    cleanup.push(() => agent.destroy());
    const sockets = new Set<unknown>();
    for (let i = 0; i < 100; i++) {
      const r = await get(`${url}/n${i}`, { agent });
      expect(r.status).toBe(200);
      sockets.add(r.socket);
    }
    expect(sockets.size).toBe(1);
  });

  it("a client's Connection: close ends only the client connection: the backend connection is pooled for the next client", async () => {
    // Connection is hop-by-hop: the client's close is not passed on, so a client opening a new
    // connection per request does not cost a backend connect and close per request as well.
    const seen: Array<string | undefined> = [];
    let connections = 0;
    const srv = createHttpServer({ keepAliveTimeout: 30_000 }, (req, res) => {
      seen.push(req.headers.connection);
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' }).end('ok');
    });
    srv.on('connection', () => connections++);
    const bip = loopback();
    await new Promise<void>((r) => srv.listen(0, bip, () => r()));
    cleanup.push(() => new Promise<void>((r) => {
      srv.closeAllConnections();
      srv.close(() => r());
    }));
    const { ip, port } = await serveOneConfig([node(`${bip}:${(srv.address() as { port: number }).port}`)], { protocol: 'http' });
    for (let i = 0; i < 5; i++) {
      const s = await tcpConnect(ip, port);
      s.write(`GET /c${i} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
      const out = (await readAll(s)).toString('latin1');
      expect(out).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\nok$/);
      // The backend answered keep-alive (it was not told to close); the client is told close.
      expect(out).toMatch(/\r\nConnection: close\r\n/);
      expect(out).not.toMatch(/\r\nConnection: keep-alive/i);
    }
    expect(seen).toEqual([undefined, undefined, undefined, undefined, undefined]);
    expect(connections).toBe(1);
    // An HTTP/1.0 request without keep-alive is passed on as received: that backend connection closes.
    const s = await tcpConnect(ip, port);
    s.write('GET /old HTTP/1.0\r\nHost: x\r\n\r\n');
    expect((await readAll(s)).toString('latin1')).toMatch(/\r\n\r\nok$/);
    const s2 = await tcpConnect(ip, port);
    s2.write('GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    expect((await readAll(s2)).toString('latin1')).toMatch(/\r\n\r\nok$/);
    expect(connections).toBe(2);
  });

  it('answers pipelined requests in order', async () => {
    const { ip, port } = await httpSetup(['a', 'b']);
    const s = await tcpConnect(ip, port);
    const one = 'GET /1 HTTP/1.1\r\nHost: x\r\n\r\n';
    s.write(one + one + 'GET /3 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const all = (await readAll(s)).toString('latin1');
    const statuses = all.match(/HTTP\/1\.1 200 OK/g) ?? [];
    expect(statuses).toHaveLength(3);
    // Balanced per request, answered in order.
    const who = [...all.matchAll(/x-backend: (\w+)/gi)].map((m) => m[1]);
    expect(who).toHaveLength(3);
    expect(who[0]).not.toBe(who[1]);
    expect(who[2]).toBe(who[0]);
  });

  it('passes a 10 MB upload and a 10 MB download intact, with Content-Length and chunked', async () => {
    const { url } = await httpSetup(['a']);
    const data = patternBytes(10 * 1024 * 1024, 7);
    const up = await get(`${url}/upload`, { method: 'POST', body: data });
    expect(up.body.toString()).toBe(`${data.length} ${sha256(data)}`);
    // Chunked upload (no Content-Length): node:http chunks a streamed body.
    const chunkedUp = await new Promise<string>((resolve, reject) => {
      const req = request(`${url}/upload`, { method: 'POST', agent: false }, (res) => {
        let s = '';
        res.on('data', (d) => (s += d));
        res.on('end', () => resolve(s));
      });
      req.on('error', reject);
      for (let off = 0; off < data.length; off += 1 << 20) req.write(data.subarray(off, off + (1 << 20)));
      req.end();
    });
    expect(chunkedUp).toBe(`${data.length} ${sha256(data)}`);
    const down = await get(`${url}/download?bytes=${10 * 1024 * 1024}&seed=3`);
    expect(down.headers['content-length']).toBe(String(10 * 1024 * 1024));
    expect(sha256(down.body)).toBe(sha256(patternBytes(10 * 1024 * 1024, 3)));
    const downChunked = await get(`${url}/download?bytes=${10 * 1024 * 1024}&seed=4&chunked=1`);
    expect(downChunked.headers['transfer-encoding']).toBe('chunked');
    expect(sha256(downChunked.body)).toBe(sha256(patternBytes(10 * 1024 * 1024, 4)));
  });

  it('passes a WebSocket upgrade through and echoes both ways', async () => {
    const { ip, port, backends } = await httpSetup(['ws']);
    const s = await tcpConnect(ip, port);
    s.write('GET /chat HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n');
    let got = '';
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    await waitFor(() => got.includes('\r\n\r\n'), 5000, '101');
    expect(got).toMatch(/^HTTP\/1\.1 101/);
    expect(backends[0].lastHeaders!.upgrade).toBe('websocket');
    s.write('frame-one');
    await waitFor(() => got.endsWith('frame-one'), 5000, 'echo');
    s.write('frame-two');
    await waitFor(() => got.endsWith('frame-two'), 5000, 'echo 2');
    s.destroy();
  });

  it('answers 503 with a small body when no node can serve', async () => {
    const { ip, port } = await serveOneConfig([node('127.0.0.1:1', { mode: 'reject' })], { protocol: 'http' });
    const r = await get(`http://${ip}:${port}/`);
    expect(r.status).toBe(503);
    expect(r.body.toString()).toMatch(/No server is available/);
  });

  it('rejects a malformed request with 400 and an oversized head with 431', async () => {
    const { ip, port } = await httpSetup(['a']);
    const s = await tcpConnect(ip, port);
    s.write('GET / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n');
    expect((await readAll(s)).toString()).toMatch(/^HTTP\/1\.1 400/);
    const s2 = await tcpConnect(ip, port);
    s2.write(`GET / HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20000)}\r\n\r\n`);
    expect((await readAll(s2)).toString()).toMatch(/^HTTP\/1\.1 431/);
  });
});

describe('http proxy edge cases', () => {
  it('frames bodies exactly: a POST with a body and a chunked POST pipelined with a GET', async () => {
    const { ip, port } = await httpSetup(['a']);
    const s = await tcpConnect(ip, port);
    s.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello' +
      'POST /upload HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhel\r\n2;x=y\r\nlo\r\n0\r\n\r\n' +
      'GET /last HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const all = (await readAll(s)).toString('latin1');
    expect(all.match(/HTTP\/1\.1 200 OK/g)).toHaveLength(3);
    // Both uploads arrived as exactly "hello".
    expect(all.match(/5 2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824/g)).toHaveLength(2);
  });

  it('forwards a 100 Continue before the final response', async () => {
    const { ip, port } = await httpSetup(['a']);
    const s = await tcpConnect(ip, port);
    let got = '';
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.write('POST /upload HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n');
    await waitFor(() => got.startsWith('HTTP/1.1 100 Continue\r\n\r\n'), 5000, '100 Continue');
    s.write('hello');
    await waitFor(() => /HTTP\/1\.1 200 OK[\s\S]*5 2cf24dba/.test(got), 5000, 'final response');
    s.destroy();
  });

  it('replays a bodiless request once when a pooled connection was closed under it, without marking the node down', async () => {
    const { createServer } = await import('node:net');
    const ip = loopback();
    let sockets = 0;
    // Answers one request per connection with keep-alive, then drops the connection when the
    // next request arrives: the keep-alive race a pool has to survive.
    const srv = createServer((sock) => {
      sockets++;
      let served = 0;
      sock.on('data', () => {
        if (served++ === 0) sock.write('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\nok');
        else sock.destroy();
      });
      sock.on('error', () => undefined);
    });
    await new Promise<void>((r) => srv.listen(0, ip, r));
    cleanup.push(() => new Promise((r) => srv.close(r)));
    const backend = `${ip}:${(srv.address() as { port: number }).port}`;
    const lip = loopback();
    const port = await freePort(lip);
    const { engine } = newEngine();
    const events: string[] = [];
    engine.onHealth((e) => events.push(e.status));
    await engine.apply(snapshot(1, [nodebalancer(lip, [config(port, [node(backend)], { protocol: 'http', checkPassive: true })])]));
    for (let i = 0; i < 3; i++) {
      const r = await get(`http://${lip}:${port}/`);
      expect(r.status).toBe(200);
      expect(r.body.toString()).toBe('ok');
    }
    expect(sockets).toBe(3);
    expect(events).not.toContain('DOWN');
  });
});
