/**
 * A database endpoint's client whose member fails it before the handshake (docs/databases.md,
 * "What the data plane does with a connection"), on real sockets with members that speak first
 * as a MySQL server does: a member still starting (refused, then listening), one that closes
 * without a word or refuses with an ERR packet, and a snapshot naming another member while the
 * client waits. The client is dialled again and gets a handshake; one whose bytes already went to
 * a member is not.
 */
import { createServer, connect, type Server, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { loopback, waitFor } from '../../helpers/backends.js';
import { freePort } from './snapshot.js';

type Mode = 'greet' | 'err' | 'close' | 'read-then-close';

const packet = (payload: Buffer) => Buffer.concat([Buffer.from([payload.length & 0xff, (payload.length >> 8) & 0xff, 0, 0]), payload]);
const GREETING = packet(Buffer.concat([Buffer.from([0x0a]), Buffer.from('10.11.99-member\0')]));
const REFUSAL = packet(Buffer.concat([Buffer.from([0xff, 0x4a, 0x04]), Buffer.from('Proxy header is not accepted')]));

/** A member on ip:port that answers each connection as its `mode` says at that moment. */
interface Member { ip: string; port: number; seen: number; mode: Mode; server?: Server; listen(): Promise<void>; close(): Promise<void> }

async function member(mode: Mode): Promise<Member> {
  const ip = loopback();
  const open = new Set<Socket>();
  const m: Member = {
    ip, port: await freePort(ip), seen: 0, mode,
    listen: () => new Promise((resolve) => {
      m.server = createServer((s) => {
        m.seen++;
        open.add(s);
        s.on('close', () => open.delete(s));
        s.on('error', () => undefined);
        if (m.mode === 'greet') s.write(GREETING);
        else if (m.mode === 'err') s.end(REFUSAL);
        else if (m.mode === 'close') s.destroy();
        else s.once('data', () => s.destroy());
      }).listen(m.port, ip, () => resolve());
    }),
    close: () => new Promise((resolve) => {
      for (const s of open) s.destroy();
      if (m.server) m.server.close(() => resolve());
      else resolve();
    }),
  };
  return m;
}

describe('data plane database endpoints: a client is not lost to a member that is not serving yet', () => {
  let engine: ProxyEngine;
  const address = loopback();
  let port = 0;
  let version = 0;
  const sockets: Socket[] = [];
  const members: Member[] = [];

  const apply = (targets: Member[]) => engine.apply({
    version: ++version,
    databaseEndpoints: [{ databaseId: 7, role: 'primary', address, port, allowList: ['127.0.0.0/8'], targets: targets.map((t) => ({ host: t.ip, port: t.port })) }],
  });
  const stats = () => [...engine.databaseEndpoints()][0]!.stats;
  const fresh = async (mode: Mode, listening = true) => {
    const m = await member(mode);
    members.push(m);
    if (listening) await m.listen();
    return m;
  };

  /** A client that waits for the server to speak (`say`: what it sends first, a client-first protocol). */
  const client = (say?: string) => {
    const s = connect({ host: address, port, localAddress: loopback() });
    sockets.push(s);
    let got = Buffer.alloc(0);
    const done = new Promise<{ got: Buffer; closed: boolean }>((resolve) => {
      s.on('data', (d) => {
        got = Buffer.concat([got, d]);
        if (got.length >= GREETING.length && got[4] === 0x0a) resolve({ got, closed: false });
      });
      s.on('error', () => undefined);
      s.on('close', () => resolve({ got, closed: true }));
    });
    if (say) s.once('connect', () => s.write(say));
    return { socket: s, done };
  };

  beforeAll(async () => {
    port = await freePort(address);
    engine = createProxyEngine({ logger: silentLogger() });
    await apply([await fresh('greet')]);
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await engine?.close();
    for (const m of members) await m.close();
  });

  it('a member still starting (refused) serves the client once it listens', async () => {
    const starting = await fresh('greet', false);
    await apply([starting]);
    const errors = stats().upstreamErrors;
    const c = client();
    await waitFor(() => stats().upstreamErrors > errors || undefined, 5_000, 'the first dial refused');
    await starting.listen();
    const { got, closed } = await c.done;
    expect(closed).toBe(false);
    expect(got.subarray(0, GREETING.length)).toEqual(GREETING);
  });

  it('a member that closes before its handshake: the client waits, and the member of the next snapshot serves it', async () => {
    const stopping = await fresh('close');
    await apply([stopping]);
    const c = client();
    await waitFor(() => stopping.seen >= 2 || undefined, 5_000, 'the client dialled again');
    const next = await fresh('greet');
    await apply([next]);
    const { got, closed } = await c.done;
    expect(closed).toBe(false);
    expect(got.subarray(0, GREETING.length)).toEqual(GREETING);
    expect(next.seen).toBe(1);
  });

  it('an ERR packet before the handshake is retried; the handshake that follows reaches the client, the ERR never', async () => {
    const starting = await fresh('err');
    await apply([starting]);
    const c = client();
    await waitFor(() => starting.seen >= 2 || undefined, 5_000, 'the client dialled again');
    starting.mode = 'greet';
    const { got, closed } = await c.done;
    expect(closed).toBe(false);
    expect(got).toEqual(GREETING);
  });

  it('a member that keeps refusing: after the wait the client gets its last ERR as sent, and is closed', async () => {
    const refusing = await fresh('err');
    await apply([refusing]);
    const t0 = Date.now();
    const { got, closed } = await client().done;
    expect(closed).toBe(true);
    expect(got).toEqual(REFUSAL);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(2_900);
    expect(refusing.seen).toBeGreaterThan(2);
  });

  it('a client whose bytes already went to a member is not dialled again', async () => {
    const reader = await fresh('read-then-close');
    await apply([reader]);
    const { closed } = await client('hello').done;
    expect(closed).toBe(true);
    expect(reader.seen).toBe(1);
  });
});
