/**
 * A data plane's database endpoints on real sockets (docs/databases.md, "Database endpoints"),
 * with TCP echo servers as members: the PROXY v1 header leaves from the endpoint source address
 * and names the client; the allow_list, an unknown primary (after a 3 s wait for one) and the TLS
 * rule refuse before a byte reaches a member; a narrower allow_list and a new primary close the connections they no longer
 * admit; a snapshot that puts an endpoint on a NodeBalancer's ip:port is NACKed whole.
 */
import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { loopback, startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';
import { echoBackend } from '../../helpers/tcp.js';
import { freePort } from './snapshot.js';

describe('data plane database endpoints', () => {
  let engine: ProxyEngine;
  let a: TcpBackend;
  let b: TcpBackend;
  const address = loopback();
  const source = loopback();
  let port = 0;
  let version = 0;
  const sockets: Socket[] = [];
  const peers: string[] = [];

  const apply = (over: Record<string, unknown> = {}) => engine.apply({
    version: ++version,
    databaseEndpoints: [{ databaseId: 5, role: 'primary', address, port, allowList: ['127.0.0.0/8'], targets: [{ host: a.ip, port: a.port }], ...over }],
  });
  const stats = () => [...engine.databaseEndpoints()][0]!.stats;

  /** Opens a client from `from`, sends `msg`, and resolves with what came back once it holds `msg` (or on close). */
  const talk = (from: string, msg: string) => {
    const s = connect({ host: address, port, localAddress: from });
    sockets.push(s);
    let got = '';
    const done = new Promise<{ got: string; closed: boolean }>((resolve) => {
      s.on('data', (d) => {
        got += d.toString('latin1');
        if (got.includes(msg)) resolve({ got, closed: false });
      });
      s.on('error', () => undefined);
      s.on('close', () => resolve({ got, closed: true }));
    });
    s.once('connect', () => s.write(msg));
    return { socket: s, done };
  };

  beforeAll(async () => {
    a = await startTcpBackend('a', {
      ip: loopback(),
      onSocket: (sock) => {
        peers.push(sock.remoteAddress ?? '');
        sock.on('data', (d) => sock.write(`a:${d.toString()}`));
      },
    });
    b = await echoBackend(loopback(), 'b');
    port = await freePort(address);
    engine = createProxyEngine({ logger: silentLogger(), endpoints: { sourceAddress: source } });
    await apply();
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await engine?.close();
    await a?.close();
    await b?.close();
  });

  it('starts each member connection with a PROXY v1 header naming the client, from the source address', async () => {
    const client = loopback();
    const { got } = await talk(client, 'hello').done;
    expect(got).toMatch(new RegExp(`^a:PROXY TCP4 ${client.replace(/\./g, '\\.')} ${address.replace(/\./g, '\\.')} \\d+ ${port}\\r\\n`));
    expect(got).toContain('hello');
    expect(peers.at(-1)).toBe(source);
  });

  it('a client that arrives while no primary is known is forwarded when one is named within the wait', async () => {
    await apply({ targets: [] });
    const waiting = talk(loopback(), 'early');
    await waitFor(() => waiting.socket.readyState === 'open' || undefined, 2000, 'client connected');
    await apply({ targets: [{ host: a.ip, port: a.port }] });
    const { got, closed } = await waiting.done;
    expect(closed).toBe(false);
    expect(got.startsWith('a:PROXY TCP4')).toBe(true);
    expect(got).toContain('early');
  });

  it('refuses clients outside the allow_list, and everybody while no primary is known, before a byte reaches a member', async () => {
    const seen = peers.length;
    await apply({ allowList: ['127.0.0.0/8'], targets: [] });
    expect((await talk(loopback(), 'x').done).closed).toBe(true);
    expect(stats().refused.no_primary).toBe(1);
    await apply({ allowList: ['10.0.0.0/8'] });
    expect((await talk(loopback(), 'x').done).closed).toBe(true);
    expect(stats().refused.allow_list).toBe(1);
    expect(peers.length).toBe(seen);
  });

  it('with require_tls answers a plain client with the insecure-transport error and never dials the member', async () => {
    await apply({ requireTls: true });
    const seen = peers.length;
    // A handshake response without CLIENT_SSL: length 32, sequence 1, capability flags 0.
    const packet = Buffer.concat([Buffer.from([32, 0, 0, 1]), Buffer.alloc(32)]);
    const s = connect({ host: address, port, localAddress: loopback() });
    sockets.push(s);
    const got = await new Promise<string>((resolve) => {
      let text = '';
      s.on('data', (d) => (text += d.toString('latin1')));
      s.on('close', () => resolve(text));
      s.on('error', () => resolve(text));
      s.once('connect', () => s.write(packet));
    });
    expect(got).toContain('insecure transport');
    // The member saw the PROXY header's connection only, and nothing of the client's bytes.
    expect(got).not.toContain('a:');
    expect(peers.length).toBeLessThanOrEqual(seen + 1);
  });

  it('a narrower allow_list closes established connections it no longer admits; a new primary closes those to the old one', async () => {
    await apply({ requireTls: false });
    const stay = loopback();
    const leave = loopback();
    const first = talk(stay, 'one');
    const second = talk(leave, 'two');
    expect((await first.done).got).toContain('one');
    expect((await second.done).got).toContain('two');
    await apply({ allowList: [`${stay}/32`] });
    await waitFor(() => second.socket.destroyed || second.socket.readyState === 'closed', 5000, 'the no longer allowed client cut');
    expect(first.socket.destroyed).toBe(false);

    await apply({ allowList: [`${stay}/32`], targets: [{ host: b.ip, port: b.port }] });
    await waitFor(() => first.socket.destroyed || first.socket.readyState === 'closed', 5000, 'the connection to the old primary cut');
    const { got } = await talk(stay, 'three').done;
    expect(got.startsWith('b:PROXY TCP4')).toBe(true);
    expect(got).toContain('three');
  });

  it('a member that refuses is skipped: every client of a two-target endpoint reaches the live one', async () => {
    const dead = loopback();
    const deadPort = await freePort(dead);
    await apply({ role: 'secondary', allowList: ['127.0.0.0/8'], targets: [{ host: dead, port: deadPort }, { host: b.ip, port: b.port }] });
    const errorsBefore = stats().upstreamErrors;
    for (let i = 0; i < 4; i++) {
      const { got, closed } = await talk(loopback(), `r${i}`).done;
      expect(closed, `client ${i}: ${got}`).toBe(false);
      expect(got.startsWith('b:PROXY TCP4')).toBe(true);
    }
    // Half of them were dealt the dead member first.
    expect(stats().upstreamErrors - errorsBefore).toBe(2);
  });

  it('NACKs a snapshot whose endpoint takes a NodeBalancer ip:port and keeps serving the previous one', async () => {
    const before = engine.version();
    const err = await engine.apply({
      version: before + 1,
      nodebalancers: [{ id: 1, ipv4: address, configs: [{ id: 1, port, protocol: 'tcp', nodes: [{ id: 1, address: `${b.ip}:${b.port}` }] }] }],
      databaseEndpoints: [{ databaseId: 5, role: 'primary', address, port, allowList: ['127.0.0.0/8'], targets: [{ host: b.ip, port: b.port }] }],
    }).then(() => null, (e: Error) => e);
    expect(String(err?.message ?? JSON.stringify(err))).toMatch(/already used/);
    expect(engine.version()).toBe(before);
  });
});
