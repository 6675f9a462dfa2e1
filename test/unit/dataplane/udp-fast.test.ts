import { spawn } from 'node:child_process';
import * as dgram from 'node:dgram';
import { createSocket, type RemoteInfo, type Socket } from 'node:dgram';
import { fileURLToPath } from 'node:url';
import { afterEach, describe, expect, it } from 'vitest';
import { FastUdp, fastPathAvailable, udpSendErrors } from '../../../dataplane/listeners/udp-fast.js';
import { waitFor } from '../../helpers/backends.js';

/**
 * listeners/udp-fast.ts: reads and sends on a dgram socket's native handle, past node:dgram's
 * JavaScript layer (docs/performance.md "UDP: past node:dgram's JavaScript layer"). These pin
 * that the Node we run still has the internals it relies on (else the data plane silently falls
 * back to the slower public API), and that a send the kernel could not take at once is queued
 * with its buffer kept alive.
 */
const ip = '127.119.7.1';
const sockets: Socket[] = [];
afterEach(() => {
  while (sockets.length > 0) {
    try {
      sockets.pop()!.close();
    } catch {
      // Closed by the test.
    }
  }
});

function socket(): Socket {
  const s = createSocket('udp4');
  sockets.push(s);
  return s;
}

function bind(s: Socket): Promise<number> {
  return new Promise((resolve) => s.bind(0, ip, () => resolve(s.address().port)));
}

describe('FastUdp', () => {
  it('reads and sends past node:dgram on this Node: a bound socket replies with sendTo, a connected one sends to its peer', async () => {
    expect(fastPathAvailable).toBe(true);
    // A peer that echoes with the public API.
    const peer = socket();
    peer.on('message', (m, r) => peer.send(m, r.port, r.address));
    const peerPort = await bind(peer);

    const heard: Array<{ text: string; from: RemoteInfo }> = [];
    const bound = socket();
    const io = new FastUdp(bound, (msg, from) => heard.push({ text: msg.toString(), from }));
    expect(io.fast).toBe(false); // not listening yet
    const boundPort = await bind(bound);
    expect(io.fast).toBe(true);
    io.sendTo(Buffer.from('to the peer'), peerPort, ip);
    await waitFor(() => heard.length === 1, 30_000);
    expect(heard[0]!.text).toBe('to the peer');
    expect(heard[0]!.from).toMatchObject({ address: ip, port: peerPort, family: 'IPv4' });

    const connected = socket();
    const replies: string[] = [];
    const out = new FastUdp(connected, (msg) => replies.push(msg.toString()));
    connected.connect(peerPort, ip);
    // connect() binds at once (an IP literal needs no lookup), and so listens.
    await waitFor(() => out.fast, 30_000);
    for (let i = 0; i < 20; i++) out.send(Buffer.from(`datagram ${i}`));
    await waitFor(() => replies.length === 20, 30_000);
    expect(new Set(replies)).toEqual(new Set(Array.from({ length: 20 }, (_, i) => `datagram ${i}`)));
    expect(boundPort).toBeGreaterThan(0);
  });

  it('takes the fast path on a socket bound to a native handle passed in, as a worker binds its slot of a reuseport group', async () => {
    // What workers/udp-group.ts makes in the primary (a bound handle that does not read yet).
    const create = (dgram as unknown as { _createSocketHandle: (a: string, p: number, t: string, fd: number, flags: number) => object })._createSocketHandle;
    const quiet = process.noDeprecation;
    process.noDeprecation = true;
    const handle = create(ip, 0, 'udp4', -1, 0);
    process.noDeprecation = quiet;
    const s = socket();
    const heard: string[] = [];
    const io = new FastUdp(s, (msg) => heard.push(msg.toString()));
    await new Promise<void>((resolve) => (s.bind as unknown as (h: object, cb: () => void) => void)(handle, resolve));
    expect(io.fast).toBe(true);
    const client = socket();
    client.send('through the passed handle', s.address().port, ip);
    await waitFor(() => heard.length === 1, 30_000);
    expect(heard).toEqual(['through the passed handle']);
  });

  it('still turns a read error into the socket\'s error event, through node:dgram\'s own handler', async () => {
    const s = socket();
    const io = new FastUdp(s, () => undefined);
    await bind(s);
    expect(io.fast).toBe(true);
    const errors: NodeJS.ErrnoException[] = [];
    s.on('error', (e: NodeJS.ErrnoException) => errors.push(e));
    // What the native side calls when recvmsg fails (src/udp_wrap.cc OnRecv, nread < 0).
    const state = Object.getOwnPropertySymbols(s).find((x) => x.description === 'state symbol')!;
    const handle = (s as unknown as Record<symbol, { handle: { onmessage: (n: number, h: unknown) => void } }>)[state].handle;
    handle.onmessage(-111, handle);
    expect(errors.map((e) => e.syscall)).toEqual(['recvmsg']);
    expect(errors[0]!.code).toBe('ECONNREFUSED');
  });

  it('counts a send the kernel refuses, on the fast path and through node:dgram, and never emits it as an error', async () => {
    const count = () => udpSendErrors().get('EMSGSIZE') ?? 0;
    // Larger than any IPv4 datagram: sendmsg refuses it with EMSGSIZE at once.
    const huge = Buffer.alloc(70_000);
    const peer = socket();
    const peerPort = await bind(peer);
    // No 'error' listener on either socket: an emitted error would throw into the event loop.
    const slow = socket();
    const before = count();
    // Not bound yet, so this send goes through node:dgram (which binds first, then sends).
    const viaDgram = new FastUdp(slow, () => undefined);
    expect(viaDgram.fast).toBe(false);
    viaDgram.sendTo(huge, peerPort, ip);
    await waitFor(() => count() === before + 1, 30_000);

    const fast = socket();
    const io = new FastUdp(fast, () => undefined);
    await bind(fast);
    expect(io.fast).toBe(true);
    io.sendTo(huge, peerPort, ip);
    expect(count()).toBe(before + 2);
    // The socket still works afterwards.
    const heard: string[] = [];
    peer.on('message', (m) => heard.push(m.toString()));
    io.sendTo(Buffer.from('after the refusal'), peerPort, ip);
    await waitFor(() => heard.length === 1, 30_000);
    expect(heard).toEqual(['after the refusal']);
    expect([...udpSendErrors().keys()].every((k) => k === 'other' || /^E[A-Z]+$/.test(k))).toBe(true);
  });

  it('queues a send the kernel could not take at once, with its buffer kept alive, and takes a fresh request after it', async () => {
    // Node's --test-udp-no-try-send makes every send take the queued path (UDPWrap::Send), the one
    // where the native side wraps our request object. A reused request there would abort the
    // process; a buffer not kept alive would be sent after the GC freed it.
    const file = fileURLToPath(new URL('../../../dataplane/listeners/udp-fast.ts', import.meta.url));
    const script = `
      const { createSocket } = require('node:dgram');
      import(${JSON.stringify(file)}).then(({ FastUdp }) => {
        const N = 2000;
        const seen = new Set();
        const rx = createSocket('udp4');
        rx.on('message', (m) => {
          const i = m.readUInt32BE(0);
          if (m.length === 512 && m.every((b, k) => k < 4 || b === (i & 0xff))) seen.add(i);
          if (seen.size === N) { console.log('all ' + N); process.exit(0); }
        });
        rx.bind(0, '${ip}', () => {
          const tx = createSocket('udp4');
          const io = new FastUdp(tx, () => undefined);
          tx.bind(0, '${ip}', () => {
            if (!io.fast) { console.log('not fast'); process.exit(1); }
            let i = 0;
            const burst = () => {
              for (let k = 0; k < 20 && i < N; k++, i++) {
                const b = Buffer.alloc(512, i & 0xff);
                b.writeUInt32BE(i, 0);
                io.sendTo(b, rx.address().port, '${ip}');
              }
              globalThis.gc();
              if (i < N) setTimeout(burst, 5);
            };
            burst();
          });
        });
        setTimeout(() => { console.log('got ' + seen.size); process.exit(1); }, 60000).unref();
      });
    `;
    const child = spawn(process.execPath, ['--test-udp-no-try-send', '--expose-gc', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.on('exit', (c) => resolve(c)));
    expect(out.trim()).toBe('all 2000');
    expect(code).toBe(0);
  }, 90_000);
});
