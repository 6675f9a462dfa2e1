import { createServer, type Server } from 'node:http';
import { connect, type Socket } from 'node:net';
import { afterEach, describe, expect, it } from 'vitest';
import { isLoopbackHost, limitListener, listenerServerOptions } from '../../../lib/listener-limits.js';

describe('isLoopbackHost', () => {
  it('is true for 127/8, ::1, ::ffff:127.x and localhost only', () => {
    for (const h of ['127.0.0.1', '127.213.0.9', '::1', '::ffff:127.0.0.1', 'localhost']) expect(isLoopbackHost(h), h).toBe(true);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', '::2', 'api.example.com', '']) expect(isLoopbackHost(h), h).toBe(false);
  });
});

describe('listenerServerOptions', () => {
  it('checks for expired requests often enough for the timeout, and times the TLS handshake too', () => {
    expect(listenerServerOptions({ requestTimeoutMs: 2000, idleTimeoutMs: 60_000, maxConnections: 0, maxConnectionsPerAddress: 0 }))
      .toEqual({ requestTimeout: 2000, headersTimeout: 2000, keepAliveTimeout: 60_000, connectionsCheckingInterval: 500, handshakeTimeout: 2000 });
    expect(listenerServerOptions({ requestTimeoutMs: 300_000, idleTimeoutMs: 75_000, maxConnections: 0, maxConnectionsPerAddress: 0 }).connectionsCheckingInterval).toBe(30_000);
  });
});

describe('limitListener', () => {
  let server: Server | undefined;
  const sockets: Socket[] = [];
  afterEach(async () => {
    for (const s of sockets.splice(0)) s.destroy();
    if (server) await new Promise((r) => server!.close(r));
  });

  it('counts a connection out when it closes, so the address gets its place back', async () => {
    server = createServer((_req, res) => res.end('ok'));
    const refused: string[] = [];
    const cap = limitListener(server, { requestTimeoutMs: 10_000, idleTimeoutMs: 10_000, maxConnections: 0, maxConnectionsPerAddress: 2 }, (c) => refused.push(c));
    await new Promise<void>((r) => server!.listen(0, '127.0.0.1', r));
    const port = (server.address() as { port: number }).port;
    const open = () => new Promise<Socket>((resolve) => {
      const s = connect(port, '127.0.0.1', () => resolve(s));
      s.on('error', () => undefined);
      sockets.push(s);
    });
    const until = async (ok: () => boolean) => {
      for (let i = 0; i < 400 && !ok(); i++) await new Promise((r) => setTimeout(r, 25));
      expect(ok()).toBe(true);
    };
    const [a] = [await open(), await open()];
    await until(() => cap.of('127.0.0.1') === 2);
    const third = await open();
    await until(() => third.destroyed || third.readableEnded);
    expect(refused).toEqual(['per_key']);
    a!.destroy();
    await until(() => cap.of('127.0.0.1') === 1);
    await open();
    await until(() => cap.of('127.0.0.1') === 2);
    expect(refused).toEqual(['per_key']);
  });

  it('counts an IPv6 client by the prefix it is given, /64 unless told', async () => {
    for (const [prefix, key] of [[undefined, '::/64'], [128, '::1/128']] as const) {
      const srv = createServer((_req, res) => res.end('ok'));
      server = srv;
      const cap = limitListener(srv, { requestTimeoutMs: 10_000, idleTimeoutMs: 10_000, maxConnections: 0, maxConnectionsPerAddress: 2, clientIpv6Prefix: prefix });
      await new Promise<void>((r) => srv.listen(0, '::1', r));
      const port = (srv.address() as { port: number }).port;
      await new Promise<void>((resolve) => {
        const s = connect(port, '::1', () => resolve());
        s.on('error', () => undefined);
        sockets.push(s);
      });
      for (let i = 0; i < 400 && cap.of(key) !== 1; i++) await new Promise((r) => setTimeout(r, 25));
      expect(cap.of(key), String(prefix)).toBe(1);
      for (const s of sockets.splice(0)) s.destroy();
      await new Promise((r) => srv.close(r));
      server = undefined;
    }
  });
});
