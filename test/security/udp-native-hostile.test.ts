import { createHook } from 'node:async_hooks';
import { createHash, randomBytes } from 'node:crypto';
import { createSocket, type Socket } from 'node:dgram';
import { closeSync, mkdtempSync, openSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { describe, expect, it } from 'vitest';
import { createProxyEngine } from '../../dataplane/engine.js';
import { nativeHandle } from '../../dataplane/listeners/udp-fast.js';
import { udpRelay, type UdpRelayHandle } from '../../dataplane/native/udp-relay.js';
import { silentLogger } from '../../lib/logger.js';
import { waitFor } from '../helpers/backends.js';
import { startUdpEcho, udpLoopback, UdpFlow } from '../helpers/udp.js';
import { cleanup } from '../integration/dataplane/engine-harness.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';

/**
 * What a hostile client can throw at the native udp datagram path (dataplane/native/udp_relay.c,
 * docs/security/traffic.md "UDP"), performed against an engine on it: datagrams of every size
 * from zero to UDP's largest and of arbitrary bytes, in both directions, on a new flow (handed to
 * JavaScript) and on an established one (relayed in C); floods of new flows from one address and
 * from many (the flow table grows past its first size and stays within the caps); and the addon's
 * own arguments, which must be refused, never read past, also on a relay already destroyed.
 * Then what JavaScript itself can do to the addon (its review's findings): detach or shrink the
 * policy epoch's buffer, pass ids and ports that only wrap or round to valid ones, key two
 * link-local clients with one address, fail a create, and destroy a relay from its own callback.
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
    // Each refusal by its own message: a call that threw for another reason (a missing export,
    // an argument check that named the wrong thing) would not pass.
    const sock = createSocket('udp4');
    await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
    cleanup.push(() => sock.close());
    const epoch = new Int32Array(1);
    const noop = () => undefined;
    expect(() => addon.create(-1, epoch, noop, noop, noop)).toThrow('fd must be an integer from 0 to 2^31-1');
    expect(() => addon.create(0, new Int32Array(0), noop, noop, noop)).toThrow('epoch must be an Int32Array');
    const fd = (sock as unknown as { _handle?: { fd: number } })._handle?.fd ?? ((): number => {
      const sym = Object.getOwnPropertySymbols(sock).find((s) => s.description === 'state symbol')!;
      return (sock as unknown as Record<symbol, { handle: { fd: number } }>)[sym].handle.fd;
    })();
    const r: UdpRelayHandle = addon.create(fd, epoch, noop, noop, noop);
    expect(() => addon.open(r, 'x'.repeat(10_000), 1, '127.0.0.1', 9, true)).toThrow('bad address');
    expect(() => addon.open(r, 'not-an-ip', 1, '127.0.0.1', 9, true)).toThrow('not an IP literal');
    expect(() => addon.open(r, '127.0.0.1', 70_000, '127.0.0.1', 9, true)).toThrow('port must be an integer from 0 to 65535');
    expect(() => addon.open(r, '127.0.0.1', 1, '127.0.0.1\0junk', 9, true)).toThrow('bad address');
    const id = addon.open(r, '127.0.0.1', 1, '127.0.0.1', 9, true);
    expect(id).toBeGreaterThanOrEqual(0);
    expect(addon.open(r, '127.0.0.1', 1, '127.0.0.1', 9, true)).toBeLessThan(0); // the same flow twice
    expect(() => addon.send(r, id, 'text' as unknown as Buffer)).toThrow('expected a Buffer');
    expect(addon.send(r, 12345, Buffer.from('x'))).toBeLessThan(0); // no such session
    expect(() => addon.reply(r, Buffer.from('x'), '::ffff:zz', 1)).toThrow('not an IP literal');
    addon.close(r, id);
    expect(addon.send(r, id, Buffer.from('x'))).toBeLessThan(0); // closed
    addon.destroy(r);
    addon.destroy(r); // twice: harmless
    expect(() => addon.open(r, '127.0.0.1', 2, '127.0.0.1', 9, true)).toThrow('not a live udp relay');
    expect(() => addon.send(r, id, Buffer.from('x'))).toThrow('not a live udp relay');
    expect(() => addon.collect(r)).toThrow('not a live udp relay');
    expect(() => addon.destroy({} as UdpRelayHandle)).toThrow('not a udp relay');
  });
});

/** ES2024's ArrayBuffer (Node has it; the project's lib setting predates it). */
type Buffer2024 = ArrayBuffer & { transfer(length?: number): ArrayBuffer; resize(length: number): void };
const ArrayBuffer2024 = ArrayBuffer as unknown as new (length: number, options?: { maxByteLength: number }) => Buffer2024;

/** A relay on its own listening socket (no engine), with its own epoch and what it handed to JavaScript. */
async function bareRelay(epoch: Int32Array, on: { datagram?: (msg: Buffer) => void; reply?: (id: number, msg: Buffer) => void } = {}) {
  const addon = udpRelay!;
  const sock = createSocket('udp4');
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  cleanup.push(() => sock.close());
  const handle = nativeHandle(sock) as unknown as { fd: number; recvStop(): number };
  const datagrams: string[] = [];
  const replies: string[] = [];
  const r = addon.create(handle.fd, epoch, (msg) => {
    datagrams.push(msg.toString());
    on.datagram?.(msg);
  }, (id, msg) => {
    replies.push(msg.toString());
    on.reply?.(id, msg);
  }, () => undefined);
  handle.recvStop();
  cleanup.push(() => addon.destroy(r));
  return { addon, r, port: sock.address().port, datagrams, replies };
}

/** A client socket on 127.0.0.1 and what it heard. */
async function clientSocket() {
  const sock = createSocket('udp4');
  const heard: string[] = [];
  sock.on('message', (m) => heard.push(m.toString()));
  await new Promise<void>((r) => sock.bind(0, '127.0.0.1', () => r()));
  cleanup.push(() => sock.close());
  return { sock, heard, port: sock.address().port, send: (msg: string, port: number) => new Promise<void>((r) => sock.send(msg, port, '127.0.0.1', () => r())) };
}

/** An established session from a client through a bare relay to an echo backend. */
async function establishedFlow(epoch: Int32Array) {
  const echo = await startUdpEcho('b', '127.0.0.1');
  cleanup.push(() => echo.close());
  const relay = await bareRelay(epoch);
  const client = await clientSocket();
  const id = relay.addon.open(relay.r, '127.0.0.1', client.port, '127.0.0.1', echo.port, true);
  expect(id).toBeGreaterThanOrEqual(0);
  relay.addon.establish(relay.r, id, epoch[0]!);
  return { ...relay, client, id };
}

describe('udp native relay: what JavaScript can do to it', () => {
  it('reads the policy epoch through the array, never through a pointer kept into a buffer JavaScript detached or shrank', async () => {
    // transfer() detaches the array's buffer (its memory moves to the new one, or is freed when
    // the length changes); resize(0) shrinks a resizable one. Before, the relay kept reading the
    // old memory: a session stayed established (relayed in C) on a buffer gone, or the process
    // fell over reading a page given back.
    const cases: Array<[string, () => { epoch: Int32Array; spoil(): void; restore?(): void }]> = [
      ['transfer()', () => {
        const epoch = new Int32Array(1);
        return { epoch, spoil: () => void (epoch.buffer as Buffer2024).transfer() };
      }],
      ['transfer(64)', () => {
        const epoch = new Int32Array(1);
        return { epoch, spoil: () => void (epoch.buffer as Buffer2024).transfer(64) };
      }],
      ['resize(0)', () => {
        const ab = new ArrayBuffer2024(4, { maxByteLength: 1 << 16 });
        return { epoch: new Int32Array(ab), spoil: () => ab.resize(0), restore: () => ab.resize(4) };
      }],
    ];
    for (const [name, make] of cases) {
      const { epoch, spoil, restore } = make();
      const f = await establishedFlow(epoch);
      let before = f.addon.relayed();
      await f.client.send('one', f.port);
      await waitFor(() => f.client.heard.includes('b:one'), 30_000, `${name}: the established flow answered`);
      expect(f.addon.relayed() - before, name).toBe(2);
      expect(f.datagrams, name).toEqual([]);
      spoil();
      before = f.addon.relayed();
      await f.client.send('two', f.port);
      // No epoch to compare with: the datagram goes through JavaScript, as for a session not established.
      await waitFor(() => f.datagrams.includes('two'), 30_000, `${name}: the datagram handed to JavaScript`);
      expect(f.addon.relayed(), name).toBe(before);
      if (restore !== undefined) {
        restore(); // the buffer holds an epoch again (0, the session's): relayed in C again
        await f.client.send('three', f.port);
        await waitFor(() => f.client.heard.includes('b:three'), 30_000, `${name}: relayed again`);
        expect(f.addon.relayed() - before, name).toBe(2);
      }
    }
  });

  it('refuses ids, ports, descriptors and epochs that are not integers in range, instead of wrapping or rounding them', async () => {
    const epoch = new Int32Array(1);
    const f = await establishedFlow(epoch);
    const { addon, r, id } = f;
    const x = Buffer.from('x');
    // 2^32 + id wrapped to id, and id + 0.5 was cut to id: the call reached session `id`.
    expect(() => addon.send(r, id + 2 ** 32, x)).toThrow(RangeError);
    expect(() => addon.send(r, id + 0.5, x)).toThrow(RangeError);
    expect(() => addon.send(r, -1, x)).toThrow(RangeError);
    expect(() => addon.send(r, Number.NaN, x)).toThrow(RangeError);
    expect(() => addon.send(r, String(id) as unknown as number, x)).toThrow(TypeError);
    expect(() => addon.disconnect(r, id + 2 ** 32)).toThrow(RangeError);
    expect(() => addon.establish(r, id + 2 ** 32, 0)).toThrow(RangeError);
    expect(() => addon.close(r, id + 2 ** 32)).toThrow(RangeError);
    // Ports: 2^32 + 5 wrapped to 5, 1.5 was cut to 1.
    expect(() => addon.open(r, '127.0.0.1', 2 ** 32 + 5, '127.0.0.1', 9, true)).toThrow(RangeError);
    expect(() => addon.open(r, '127.0.0.1', 1.5, '127.0.0.1', 9, true)).toThrow(RangeError);
    expect(() => addon.open(r, '127.0.0.1', 7, '127.0.0.1', 2 ** 32 + 9, true)).toThrow(RangeError);
    expect(() => addon.open(r, '127.0.0.1', 7, '127.0.0.1', Infinity, true)).toThrow(RangeError);
    expect(() => addon.reply(r, x, '127.0.0.1', 2 ** 32 + f.client.port)).toThrow(RangeError);
    // An epoch out of Int32 range wrapped to a current one (2^32 is 0 as an Int32).
    expect(() => addon.establish(r, id, 2 ** 32)).toThrow(RangeError);
    expect(() => addon.establish(r, id, 0.5)).toThrow(RangeError);
    // A descriptor: 2^32 + fd wrapped to fd and made a second relay on that socket.
    const fd = (nativeHandle(f.client.sock) as unknown as { fd: number }).fd;
    expect(() => addon.create(fd + 2 ** 32, epoch, () => undefined, () => undefined, () => undefined)).toThrow(RangeError);
    expect(() => addon.create(fd + 0.5, epoch, () => undefined, () => undefined, () => undefined)).toThrow(RangeError);
    // Nothing above reached the session: still established, relayed in C, and open.
    const before = addon.relayed();
    await f.client.send('still', f.port);
    await waitFor(() => f.client.heard.includes('b:still'), 30_000, 'the session still relayed');
    expect(addon.relayed() - before).toBe(2);
    expect(addon.stats(r)[0]).toBe(1);
  });

  it('keeps two link-local clients with one address on two interfaces apart', async () => {
    const { addon, r } = await bareRelay(new Int32Array(1));
    // A link-local address means nothing without its interface: "fe80::1%lo" and "fe80::1%2" are
    // two hosts. Before, the zone was refused and the scope left out of the flow key.
    const a = addon.open(r, 'fe80::1%lo', 4000, '127.0.0.1', 9, true);
    const b = addon.open(r, 'fe80::1%2', 4000, '127.0.0.1', 9, true);
    expect(a).toBeGreaterThanOrEqual(0);
    expect(b).toBeGreaterThanOrEqual(0);
    expect(b).not.toBe(a);
    expect(addon.open(r, 'fe80::1%1', 4000, '127.0.0.1', 9, true)).toBe(-17); // lo is interface 1: EEXIST
    expect(addon.open(r, 'fe80::1%2', 4000, '127.0.0.1', 9, true)).toBe(-17);
    expect(addon.stats(r)[0]).toBe(2);
    for (const bad of ['fe80::1%', 'fe80::1%0', 'fe80::1%2x', 'fe80::1%no-such-if0', '127.0.0.1%lo', 'fe80::1%lo%lo']) {
      expect(() => addon.open(r, bad, 4001, '127.0.0.1', 9, true), bad).toThrow(TypeError);
    }
  });

  it('a create that fails (a descriptor epoll refuses) keeps nothing of what it was given', async () => {
    const addon = udpRelay!;
    const dir = mkdtempSync(join(tmpdir(), 'udpsafe-'));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const fd = openSync(join(dir, 'plain-file'), 'w');
    cleanup.push(() => closeSync(fd));
    setFlagsFromString('--expose-gc');
    const gc = runInNewContext('gc') as () => void;
    // In a function of its own, so that nothing on this frame holds the arguments.
    const attempt = (): { error: unknown; refs: Array<WeakRef<object>> } => {
      const cb = () => undefined;
      const epoch = new Int32Array(1);
      let error: unknown = null;
      try {
        addon.create(fd, epoch, cb, cb, cb);
      } catch (e) {
        error = e;
      }
      return { error, refs: [new WeakRef(cb), new WeakRef(epoch)] };
    };
    const { error, refs } = attempt();
    expect(String(error)).toMatch(/poll of the listening socket failed/);
    // Before, the relay kept a strong reference to each argument: they were never collected.
    await waitFor(async () => {
      await new Promise((r) => setImmediate(r));
      gc();
      return refs.every((w) => w.deref() === undefined);
    }, 30_000, 'the arguments of the failed create collected');
  });

  it('a relay destroyed from inside its own callbacks stops at once and ends its async context after the callback', async () => {
    const events: string[] = [];
    const ours = new Set<number>();
    const hook = createHook({
      init: (asyncId, type) => void (type === 'fulcrum:udp-relay' && ours.add(asyncId)),
      before: (asyncId) => void (ours.has(asyncId) && events.push(`before ${asyncId}`)),
      after: (asyncId) => void (ours.has(asyncId) && events.push(`after ${asyncId}`)),
      destroy: (asyncId) => void (ours.has(asyncId) && events.push(`destroy ${asyncId}`)),
    }).enable();
    cleanup.push(() => hook.disable());

    // From onDatagram, with more datagrams of the same batch still to hand over.
    let relay: Awaited<ReturnType<typeof bareRelay>> | null = null;
    relay = await bareRelay(new Int32Array(1), { datagram: () => relay!.addon.destroy(relay!.r) });
    const client = await clientSocket();
    for (let i = 0; i < 5; i++) await client.send(`d${i}`, relay.port);
    await waitFor(() => relay!.datagrams.length > 0, 30_000, 'the first datagram handed over');
    expect(() => relay!.addon.collect(relay!.r)).toThrow(/not a live udp relay/);

    // From onReply, with more replies waiting on the session socket.
    const echo = await startUdpEcho('e', '127.0.0.1');
    cleanup.push(() => echo.close());
    let second: Awaited<ReturnType<typeof bareRelay>> | null = null;
    second = await bareRelay(new Int32Array(1), { reply: () => second!.addon.destroy(second!.r) });
    const id = second.addon.open(second.r, '127.0.0.1', client.port, '127.0.0.1', echo.port, true);
    for (let i = 0; i < 5; i++) expect(second.addon.send(second.r, id, Buffer.from(`r${i}`))).toBe(0);
    await waitFor(() => echo.received === 5 && second!.replies.length > 0, 30_000, 'the first reply handed over');

    // Each relay: one callback, its async context ended only after it (destroy after after).
    await waitFor(() => events.filter((e) => e.startsWith('destroy')).length === 2, 30_000, 'both async contexts ended');
    // Both callbacks have returned (their async contexts ended), and each relay was destroyed
    // inside its first one: nothing more reached JavaScript.
    expect(relay.datagrams).toEqual(['d0']);
    expect(second.replies).toEqual(['e:r0']);
    const ids = [...ours].filter((a) => events.includes(`destroy ${a}`));
    expect(ids).toHaveLength(2);
    for (const a of ids) expect(events.filter((e) => e.endsWith(` ${a}`))).toEqual([`before ${a}`, `after ${a}`, `destroy ${a}`]);
  });
});
