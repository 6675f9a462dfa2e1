import { createHash, randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { describe, expect, it } from 'vitest';
import { createProxyEngine } from '../../dataplane/engine.js';
import { udpRelay, type UdpRelayHandle } from '../../dataplane/native/udp-relay.js';
import { silentLogger } from '../../lib/logger.js';
import { waitFor } from '../helpers/backends.js';
import { udpLoopback, UdpFlow } from '../helpers/udp.js';
import { cleanup } from '../integration/dataplane/engine-harness.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';

/**
 * What a hostile client can throw at the native udp datagram path (dataplane/native/udp_relay.c,
 * docs/security/traffic.md "UDP"), performed against an engine on it: datagrams of every size
 * from zero to UDP's largest and of arbitrary bytes, in both directions, on a new flow (handed to
 * JavaScript) and on an established one (relayed in C); floods of new flows from one address and
 * from many (the flow table grows past its first size and stays within the caps); and the addon's
 * own arguments, which must be refused, never read past, also on a relay already destroyed.
 */

const MAX = 65507;

function digest(b: Buffer): string {
  return createHash('sha256').update(b).digest('hex').slice(0, 16);
}

/** A backend that answers each datagram with its length and digest, or, asked `big`, with MAX bytes. */
function startMeter(ip: string): Promise<{ port: number; address: string; close(): void }> {
  const sock = createSocket('udp4');
  sock.on('message', (msg, from) => {
    const answer = msg.toString() === 'big' ? Buffer.alloc(MAX, 0x5a) : Buffer.from(`len:${msg.length}:${digest(msg)}`);
    sock.send(answer, from.port, from.address);
  });
  return new Promise((resolve) => sock.bind(0, ip, () => {
    const port = sock.address().port;
    resolve({ port, address: `${ip}:${port}`, close: () => sock.close() });
  }));
}

/** A raw client socket: sends a buffer, resolves with the next answer (or null after 5 s). */
function rawClient(ip: string, port: number): Promise<{ ask(b: Buffer): Promise<Buffer | null>; sock: Socket }> {
  const sock = createSocket('udp4');
  const waiting: Array<(b: Buffer) => void> = [];
  sock.on('message', (m) => waiting.shift()?.(m));
  cleanup.push(() => sock.close());
  return new Promise((resolve) => sock.bind(0, '127.0.0.1', () => resolve({
    sock,
    ask: (b) => new Promise((r) => {
      const timer = setTimeout(() => {
        waiting.splice(waiting.indexOf(got), 1);
        r(null);
      }, 5000);
      const got = (m: Buffer) => {
        clearTimeout(timer);
        r(m);
      };
      waiting.push(got);
      sock.send(b, port, ip);
    }),
  })));
}

async function startEngine(limits: { udpSessionsPerClient?: number } = {}) {
  const meter = await startMeter(udpLoopback());
  cleanup.push(() => meter.close());
  const ip = udpLoopback();
  const port = 20000 + Math.floor(Math.random() * 20000);
  const engine = createProxyEngine({ logger: silentLogger(), limits });
  cleanup.push(() => engine.close());
  const cfg = config(port, [node(meter.address, { mode: 'none' })], { protocol: 'udp', stickiness: 'session', algorithm: 'roundrobin', check: 'none', checkPassive: false, cipherSuite: 'none', udpCheckPort: 9, udpSessionTimeout: 16 });
  await engine.apply(snapshot(1, [nodebalancer(ip, [cfg])]));
  return { engine, ip, port, cfg };
}

describe('udp native path under hostile datagrams', () => {
  it('passes datagrams of 0 to 65,507 bytes of any content whole, both ways, on new and established flows', async () => {
    expect(udpRelay).not.toBeNull();
    const { ip, port } = await startEngine();
    const payloads = [
      Buffer.alloc(0),
      Buffer.from([0]),
      Buffer.from('PROXY TCP4 1.2.3.4 5.6.7.8 1 2\r\n'),
      Buffer.concat([Buffer.from('\r\n\r\n\0\r\nQUIT\n'), randomBytes(64)]),
      Buffer.alloc(1472, 0xff),
      randomBytes(9000),
      randomBytes(MAX),
    ];
    // Each payload as a new flow's first datagram: read in C, handed to JavaScript as a copy.
    for (const p of payloads) {
      const c = await rawClient(ip, port);
      expect((await c.ask(p))?.toString()).toBe(`len:${p.length}:${digest(p)}`);
    }
    // And on one established flow: relayed in C.
    const c = await rawClient(ip, port);
    for (let i = 0; i < 3; i++) expect(await c.ask(Buffer.from('hello'))).not.toBeNull();
    const before = udpRelay!.relayed();
    for (const p of payloads) expect((await c.ask(p))?.toString()).toBe(`len:${p.length}:${digest(p)}`);
    // A reply of UDP's largest size, through the listening socket's batched send.
    const big = await c.ask(Buffer.from('big'));
    expect(big?.length).toBe(MAX);
    expect(big!.equals(Buffer.alloc(MAX, 0x5a))).toBe(true);
    expect(udpRelay!.relayed() - before).toBe(2 * (payloads.length + 1));
  });

  it('holds a flood of new flows from one address to the per-client cap, and grows the flow table for many clients', async () => {
    const { engine, ip, port, cfg } = await startEngine({ udpSessionsPerClient: 20 });
    const refused = () => (engine.refusals() as Record<string, number>).udp_client_cap ?? 0;
    const open = () => engine.config(cfg.id as number)!.traffic.open;
    const opened: UdpFlow[] = [];
    cleanup.push(() => opened.forEach((f) => f.close()));
    const flood = Array.from({ length: 300 }, () => new UdpFlow(ip, port, '127.0.0.1'));
    opened.push(...flood);
    await Promise.all(flood.map((f) => f.send('x')));
    await waitFor(() => flood.filter((f) => f.answers.length > 0).length + refused() === 300, 60_000, 'every flow answered or refused');
    expect(flood.filter((f) => f.answers.length > 0)).toHaveLength(20);
    expect(refused()).toBe(280);
    expect(open()).toBe(20);
    // 1,200 flows from 60 addresses (20 each, within the cap): more than the table's first 1,024
    // buckets, every one answered and kept apart.
    const many: UdpFlow[] = [];
    for (let a = 0; a < 60; a++) {
      const source = `127.118.${a + 1}.${Math.floor(Math.random() * 250) + 1}`;
      for (let i = 0; i < 20; i++) many.push(new UdpFlow(ip, port, source));
    }
    opened.push(...many);
    // In waves of 100: a burst of 1,200 at once overflows the listening socket's receive buffer
    // (the kernel's rmem_max caps it), which drops datagrams before any relay sees them.
    for (let w = 0; w < many.length; w += 100) {
      const wave = many.slice(w, w + 100);
      await Promise.all(wave.map((f, i) => f.send(`f${w + i}`)));
      await waitFor(() => wave.every((f) => f.answers.length > 0), 30_000, `flows ${w}-${w + 99} answered`).catch((e: Error) => {
        throw new Error(`${e.message}: ${wave.filter((f) => f.answers.length > 0).length} of 100, refusals ${JSON.stringify(engine.refusals())}`);
      });
    }
    expect(many.every((f, i) => f.answers[0] === `len:${`f${i}`.length}:${digest(Buffer.from(`f${i}`))}`)).toBe(true);
    expect(open()).toBe(1220);
    expect(refused()).toBe(280);
  }, 120_000);

  it('refuses bad arguments to the addon, and every call on a destroyed relay', async () => {
    const addon = udpRelay!;
    const sock = createSocket('udp4');
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => sock.close());
    const epoch = new Int32Array(1);
    const noop = () => undefined;
    expect(() => addon.create(-1, epoch, noop, noop, noop)).toThrow();
    expect(() => addon.create(0, new Int32Array(0), noop, noop, noop)).toThrow();
    const fd = (sock as unknown as { _handle?: { fd: number } })._handle?.fd ?? ((): number => {
      const sym = Object.getOwnPropertySymbols(sock).find((s) => s.description === 'state symbol')!;
      return (sock as unknown as Record<symbol, { handle: { fd: number } }>)[sym].handle.fd;
    })();
    const r: UdpRelayHandle = addon.create(fd, epoch, noop, noop, noop);
    expect(() => addon.open(r, 'x'.repeat(10_000), 1, '127.0.0.1', 9, true)).toThrow();
    expect(() => addon.open(r, 'not-an-ip', 1, '127.0.0.1', 9, true)).toThrow();
    expect(() => addon.open(r, '127.0.0.1', 70_000, '127.0.0.1', 9, true)).toThrow();
    expect(() => addon.open(r, '127.0.0.1', 1, '127.0.0.1\0junk', 9, true)).toThrow();
    const id = addon.open(r, '127.0.0.1', 1, '127.0.0.1', 9, true);
    expect(id).toBeGreaterThanOrEqual(0);
    expect(addon.open(r, '127.0.0.1', 1, '127.0.0.1', 9, true)).toBeLessThan(0); // the same flow twice
    expect(() => addon.send(r, id, 'text' as unknown as Buffer)).toThrow();
    expect(addon.send(r, 12345, Buffer.from('x'))).toBeLessThan(0); // no such session
    expect(() => addon.reply(r, Buffer.from('x'), '::ffff:zz', 1)).toThrow();
    addon.close(r, id);
    expect(addon.send(r, id, Buffer.from('x'))).toBeLessThan(0); // closed
    addon.destroy(r);
    addon.destroy(r); // twice: harmless
    expect(() => addon.open(r, '127.0.0.1', 2, '127.0.0.1', 9, true)).toThrow();
    expect(() => addon.send(r, id, Buffer.from('x'))).toThrow();
    expect(() => addon.collect(r)).toThrow();
    expect(() => addon.destroy({} as UdpRelayHandle)).toThrow();
  });
});
