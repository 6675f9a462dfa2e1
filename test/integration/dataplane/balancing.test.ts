import { createHash } from 'node:crypto';
import type { Socket } from 'node:net';
import { describe, expect, it } from 'vitest';
import { loopback, patternBytes, sha256, startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';
import { cleanup, serveOneConfig } from './engine-harness.js';
import { config, node } from './snapshot.js';
import { greeting, readAll, readLine, tcpConnect } from './clients.js';

async function tcpSetup(names: string[], extra: Parameters<typeof config>[2] = {}) {
  const backends: TcpBackend[] = [];
  for (const n of names) backends.push(await startTcpBackend(n));
  for (const b of backends) cleanup.push(() => b.close());
  const { ip, port, engine } = await serveOneConfig(backends.map((b) => node(b.address)), extra);
  return { backends, ip, port, engine };
}

async function hold(ip: string, port: number, localAddress?: string): Promise<{ s: Socket; who: string }> {
  const s = await tcpConnect(ip, port, localAddress);
  cleanup.push(() => s.destroy());
  return { s, who: await readLine(s) };
}

describe('balancing over tcp', () => {
  it('roundrobin with weights 1:3 over 400 connections gives 100:300', async () => {
    const a = await startTcpBackend('a');
    const b = await startTcpBackend('b');
    cleanup.push(() => a.close(), () => b.close());
    const { ip, port } = await serveOneConfig([node(a.address, { weight: 1 }), node(b.address, { weight: 3 })]);
    const counts: Record<string, number> = {};
    for (let i = 0; i < 400; i++) {
      const w = await greeting(ip, port);
      counts[w] = (counts[w] ?? 0) + 1;
    }
    expect(counts.a).toBeGreaterThanOrEqual(98);
    expect(counts.a).toBeLessThanOrEqual(102);
    expect(counts.b).toBe(400 - counts.a);
  });

  it('leastconn sends new connections to the node with fewer open ones', async () => {
    const { ip, port, backends } = await tcpSetup(['a', 'b'], { algorithm: 'leastconn' });
    const held = [];
    for (let i = 0; i < 4; i++) held.push(await hold(ip, port));
    expect(held.filter((h) => h.who === 'a')).toHaveLength(2);
    // Close both connections on a: the next two go to a, which now has none.
    for (const h of held.filter((x) => x.who === 'a')) h.s.destroy();
    // The proxy has let go of them once the backend sees them closed.
    await waitFor(() => backends[0].open === 0, 5000, 'a connections closed');
    const next1 = await hold(ip, port);
    const next2 = await hold(ip, port);
    expect([next1.who, next2.who]).toEqual(['a', 'a']);
    // Now 2 each again: a third new one may go either way, but a fourth balances it.
    const n3 = await hold(ip, port);
    const n4 = await hold(ip, port);
    expect(new Set([n3.who, n4.who])).toEqual(new Set(['a', 'b']));
  });

  it('source keeps one client IP on one node and spreads 50 client IPs over all nodes', async () => {
    const { ip, port } = await tcpSetup(['a', 'b', 'c'], { algorithm: 'source' });
    const client = loopback();
    const seen = new Set<string>();
    for (let i = 0; i < 100; i++) seen.add(await greeting(ip, port, client));
    expect(seen.size).toBe(1);
    const spread: Record<string, number> = {};
    for (let i = 0; i < 50; i++) {
      const w = await greeting(ip, port, `127.99.${i + 1}.${(i * 7) % 250 + 1}`);
      spread[w] = (spread[w] ?? 0) + 1;
    }
    expect(Object.keys(spread).sort()).toEqual(['a', 'b', 'c']);
  });

  it('closes the client connection when no node can serve, and retries a failed connect on another node', async () => {
    const { ip, port, backends, engine } = await tcpSetup(['a', 'b']);
    await backends[0].kill();
    // Every connection succeeds: a connect failure on a is retried on b before any byte was sent.
    for (let i = 0; i < 6; i++) expect(await greeting(ip, port)).toBe('b');
    await backends[1].kill();
    const s = await tcpConnect(ip, port);
    // Closed by the proxy: the (half-open capable) client sees the end of the stream.
    const closed = await new Promise<boolean>((resolve) => s.once('end', () => resolve(true)));
    expect(closed).toBe(true);
    void engine;
  });

  it('half-close: the client shuts its write side and still receives the rest', async () => {
    const b = await startTcpBackend('hc', {
      onSocket: (sock) => {
        let got = '';
        sock.on('data', (d: Buffer) => (got += d));
        sock.on('end', () => sock.end(`received:${got}`));
      },
    });
    cleanup.push(() => b.close());
    const { ip, port } = await serveOneConfig([node(b.address)]);
    const s = await tcpConnect(ip, port);
    s.end('hello');
    let text = '';
    s.on('data', (d: Buffer) => (text += d));
    await waitFor(() => text === 'received:hello', 5000, 'reply after half-close');
  });

  it('carries bulk data intact both ways, with a slow reader (backpressure)', async () => {
    const down = patternBytes(24 * 1024 * 1024, 5);
    const b = await startTcpBackend('bulk', {
      onSocket: (sock) => {
        let got = 0;
        const h = createHash('sha256');
        sock.on('data', (d: Buffer) => { got += d.length; h.update(d); });
        sock.on('end', () => sock.end(`${got} ${h.digest('hex')}\n`));
        sock.write(down);
      },
    });
    cleanup.push(() => b.close());
    const { ip, port } = await serveOneConfig([node(b.address)]);
    const s = await tcpConnect(ip, port);
    const up = patternBytes(8 * 1024 * 1024, 6);
    const received = readAll(s);
    // Read slowly at first so the proxy has to hold the backend back.
    s.pause();
    setTimeout(() => s.resume(), 300);
    s.end(up);
    const all = await received;
    expect(sha256(all.subarray(0, down.length))).toBe(sha256(down));
    expect(all.subarray(down.length).toString()).toBe(`${up.length} ${sha256(up)}\n`);
  });
});
