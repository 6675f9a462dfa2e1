import { connect, createServer, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it, vi } from 'vitest';
import { loopback, startHttpBackend, waitFor, type HttpBackend } from '../../helpers/backends.js';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';

/**
 * The HTTP idle timers are coarse (docs/performance.md "Socket idle timers"): the client side
 * and the backend side each tick every 15 s and give up after four ticks without a byte either
 * way, so after 60 to 75 s of silence (an upgraded tunnel: an hour). Real sockets; only
 * setInterval is faked, so the minutes pass at once.
 */

const TICK = 15_000;

let engine: ProxyEngine;
let good: HttpBackend;
let silent: Server;
const held: Socket[] = [];
let stopUpgrade: () => Promise<unknown> = () => Promise.resolve();
let ip: string;
let pGood = 0;
let pSilent = 0;
let pUpgrade = 0;

beforeAll(async () => {
  vi.useFakeTimers({ toFake: ['setInterval', 'clearInterval'] });
  good = await startHttpBackend('a');
  // A backend that takes the request and never answers.
  const silentIp = loopback();
  silent = createServer((s) => {
    s.on('error', () => undefined);
    held.push(s);
  });
  await new Promise<void>((r) => silent.listen(0, silentIp, () => r()));
  // A backend that switches protocols at once and then says nothing: an idle tunnel.
  const upgradeIp = loopback();
  const upgrade = createServer((s) => {
    s.on('error', () => undefined);
    held.push(s);
    s.once('data', () => s.write('HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\nConnection: Upgrade\r\n\r\n'));
  });
  await new Promise<void>((r) => upgrade.listen(0, upgradeIp, () => r()));
  stopUpgrade = () => new Promise((r) => upgrade.close(() => r(undefined)));
  ip = loopback();
  [pGood, pSilent, pUpgrade] = [await freePort(ip), await freePort(ip), await freePort(ip)];
  engine = createProxyEngine({ logger: silentLogger() });
  await engine.apply(snapshot(1, [nodebalancer(ip, [
    config(pGood, [node(good.address)], { protocol: 'http', checkPassive: false }),
    config(pSilent, [node(`${silentIp}:${(silent.address() as { port: number }).port}`)], { protocol: 'http', checkPassive: false }),
    config(pUpgrade, [node(`${upgradeIp}:${(upgrade.address() as { port: number }).port}`)], { protocol: 'http', checkPassive: false }),
  ])]));
});

afterAll(async () => {
  vi.useRealTimers();
  await engine?.close();
  for (const s of held) s.destroy();
  await new Promise((r) => silent?.close(() => r(undefined)));
  await stopUpgrade();
  await good?.close();
});

/** A raw client that records what it gets and whether the proxy closed it. */
async function client(port: number): Promise<{ s: Socket; got: () => string; closed: () => boolean }> {
  const s = connect({ host: ip, port });
  let data = '';
  let closed = false;
  s.on('data', (d: Buffer) => (data += d.toString('latin1')));
  s.on('error', () => undefined);
  s.on('close', () => (closed = true));
  await new Promise<void>((r) => s.once('connect', () => r()));
  return { s, got: () => data, closed: () => closed };
}

/** Advances the fake intervals by `ms` in ticks, letting real I/O run between them. */
async function pass(ms: number): Promise<void> {
  for (let t = 0; t < ms; t += TICK) {
    await vi.advanceTimersByTimeAsync(Math.min(TICK, ms - t));
    await new Promise((r) => setImmediate(r));
  }
}

/** True when the proxy closes `c` within a few seconds of real time. */
async function closesSoon(c: { closed: () => boolean }): Promise<boolean> {
  return waitFor(() => c.closed(), 5_000, 'the proxy to close the client').then(() => true, () => false);
}

describe('coarse HTTP idle timers', () => {
  it('cuts a client that sends nothing after 60-75 s, not before', async () => {
    const c = await client(pGood);
    // Let the session exist before the first tick (the accept is real I/O).
    await new Promise((r) => setTimeout(r, 50));
    await pass(55_000);
    expect(c.closed()).toBe(false);
    await pass(25_000);
    expect(await closesSoon(c)).toBe(true);
  });

  it('keeps a keep-alive client that sends a request every 20 s', async () => {
    const c = await client(pGood);
    for (let i = 1; i <= 5; i++) {
      c.s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
      await waitFor(() => c.got().split('HTTP/1.1 200').length - 1 === i, 10_000, `response ${i}`);
      await pass(20_000);
    }
    expect(c.closed()).toBe(false);
    await pass(80_000);
    expect(await closesSoon(c)).toBe(true);
  });

  it('answers 504 when the backend stays silent for 60-75 s, and keeps the waiting client until then', async () => {
    const before = held.length;
    const c = await client(pSilent);
    c.s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n');
    await waitFor(() => held.length > before, 10_000, 'the backend to get the request');
    await new Promise((r) => setTimeout(r, 50));
    await pass(55_000);
    expect(c.got()).toBe('');
    expect(c.closed()).toBe(false);
    await pass(25_000);
    await waitFor(() => c.got().startsWith('HTTP/1.1 504'), 5_000, 'a 504');
  });

  it('keeps an idle upgraded tunnel for an hour, then cuts it', async () => {
    const c = await client(pUpgrade);
    c.s.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: x\r\n\r\n');
    await waitFor(() => c.got().startsWith('HTTP/1.1 101'), 10_000, 'the 101');
    await new Promise((r) => setTimeout(r, 50));
    await pass(3_000_000);
    expect(c.closed()).toBe(false);
    await pass(700_000);
    expect(await closesSoon(c)).toBe(true);
  });
});
