import { createServer, connect } from 'node:net';
import { describe, expect, it } from 'vitest';
import { createProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { startTcpBackend } from '../../helpers/backends.js';
import { cleanup } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { greeting } from './clients.js';

/**
 * Wildcard listeners (docs/dataplane.md, "Wildcard listeners") with real sockets: one socket per
 * port on 0.0.0.0 serves every NodeBalancer address on that port, each connection reaching the
 * NodeBalancer of the address it was made to; an address nothing serves is reset at once.
 * Addresses: 127.64.15.0/24, ports free on every address.
 */
function wildcardEngine() {
  const engine = createProxyEngine({ logger: silentLogger(), wildcard: true, drainTimeoutMs: 1000 });
  cleanup.push(() => engine.close());
  return engine;
}

/** Connects and returns what arrived before the close: '' for a reset or an empty close. */
function answerOf(ip: string, port: number): Promise<{ data: string; error: string }> {
  return new Promise((resolve) => {
    let data = '';
    let error = '';
    const s = connect({ host: ip, port });
    const timer = setTimeout(() => s.destroy(), 10_000);
    s.on('data', (d: Buffer) => (data += d.toString()));
    s.on('error', (e: NodeJS.ErrnoException) => (error = e.code ?? e.message));
    s.on('close', () => {
      clearTimeout(timer);
      resolve({ data, error });
    });
  });
}

/** Binds ip:port (or 0.0.0.0:port) and tells whether it could. */
function canBind(ip: string, port: number): Promise<string> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once('error', (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message));
    srv.listen({ host: ip, port, exclusive: true }, () => srv.close(() => resolve('ok')));
  });
}

describe('wildcard listeners', () => {
  it('one socket per port: each NodeBalancer address gets its own NodeBalancer, an unknown address is reset at once', async () => {
    const a = await startTcpBackend('a', { ip: '127.64.15.1' });
    const b = await startTcpBackend('b', { ip: '127.64.15.2' });
    cleanup.push(() => a.close(), () => b.close());
    const port = await freePort('0.0.0.0');
    const engine = wildcardEngine();
    const nb1 = nodebalancer('127.64.15.11', [config(port, [node(a.address)])]);
    const nb2 = nodebalancer('127.64.15.12', [config(port, [node(b.address)])]);
    await engine.apply(snapshot(1, [nb1, nb2]));

    expect(await greeting('127.64.15.11', port)).toBe('a');
    expect(await greeting('127.64.15.12', port)).toBe('b');
    expect(await greeting('127.64.15.11', port)).toBe('a');
    // Nothing serves 127.64.15.13 on this port: no byte, reset.
    const unknown = await answerOf('127.64.15.13', port);
    expect(unknown.data).toBe('');
    expect(unknown.error).toBe('ECONNRESET');
    // The port is held on the wildcard address, not per NodeBalancer address.
    expect(await canBind('127.64.15.13', port)).toBe('EADDRINUSE');
    expect(await canBind('0.0.0.0', port)).toBe('EADDRINUSE');

    // A NodeBalancer removed: its address is reset from then on, the other is served as before.
    await engine.apply({ version: 2, baseVersion: 1, incremental: true, nonce: '', nodebalancers: [], removedNodebalancers: [nb1.id as number] });
    expect((await answerOf('127.64.15.11', port)).error).toBe('ECONNRESET');
    expect(await greeting('127.64.15.12', port)).toBe('b');
    // The last address of the port gone, the port's socket closes.
    await engine.apply({ version: 3, baseVersion: 2, incremental: true, nonce: '', nodebalancers: [], removedNodebalancers: [nb2.id as number] });
    expect(await canBind('0.0.0.0', port)).toBe('ok');
  });

  it('a port another process holds on one address is refused as a whole (NACK), and nothing changes', async () => {
    const a = await startTcpBackend('a', { ip: '127.64.15.3' });
    cleanup.push(() => a.close());
    const port = await freePort('0.0.0.0');
    const taken = await freePort('0.0.0.0');
    const holder = createServer().listen({ host: '127.64.15.30', port: taken, exclusive: true });
    await new Promise((r) => holder.once('listening', r));
    cleanup.push(() => new Promise((r) => holder.close(r)));
    const engine = wildcardEngine();
    const nb1 = nodebalancer('127.64.15.21', [config(port, [node(a.address)])]);
    await engine.apply(snapshot(1, [nb1]));
    const nb2 = nodebalancer('127.64.15.22', [config(taken, [node(a.address)])]);
    await expect(engine.apply(snapshot(2, [nb1, nb2]))).rejects.toThrow(new RegExp(`cannot listen on 127\\.64\\.15\\.22:${taken}: EADDRINUSE`));
    expect(engine.version()).toBe(1);
    expect(await greeting('127.64.15.21', port)).toBe('a');
  });
});

describe('a large whole state', () => {
  it('is validated and built in slices: timers run while it applies', async () => {
    const engine = createProxyEngine({ logger: silentLogger(), bind: false });
    cleanup.push(() => engine.close());
    const nodes = (n: number) => Array.from({ length: 10 }, (_, i) => node(`127.64.16.${i + 1}:80`, { label: `n${n}-${i}` }));
    const nbs = Array.from({ length: 3000 }, (_, i) => nodebalancer(`127.65.${i >> 8}.${i & 255}`, [config(80, nodes(i)), config(8080, nodes(i))]));
    let ticks = 0;
    const timer = setInterval(() => ticks++, 1);
    try {
      await engine.apply(snapshot(1, nbs));
    } finally {
      clearInterval(timer);
    }
    expect(engine.version()).toBe(1);
    expect([...engine.configs()].length).toBe(6000);
    // 3,000 NodeBalancers in one go would let no timer run; in slices of 100 they run between slices.
    expect(ticks).toBeGreaterThanOrEqual(10);
  });
});
