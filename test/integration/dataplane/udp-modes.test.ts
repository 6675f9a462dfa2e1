import { createSocket, type Socket } from 'node:dgram';
import { describe, expect, it } from 'vitest';
import { createProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { waitFor } from '../../helpers/backends.js';
import { startHealthPort, startUdpEcho, udpLoopback, UdpFlow } from '../../helpers/udp.js';
import { cleanup } from './engine-harness.js';
import { counts, startUdpTrio } from './udp-harness.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';

/**
 * UDP with real sockets, beyond udp.test.ts (docs/dataplane.md "UDP"): `source_ip` stickiness,
 * the `backup` and `reject` node modes, an `http` check on `udp_check_port`, and replies from an
 * address that is not the node's, which must never reach the client. Addresses: 127.117.0.0/16.
 */

/**
 * A UDP "node" that never answers from its own address: each datagram it gets is answered from
 * another socket (`forger`, another port on the same host or another address), to the sender.
 */
async function startForger(ip: string, forgeFrom: string): Promise<{ address: string; received: number; forged: number; close(): void }> {
  const bindOn = (host: string) => new Promise<Socket>((resolve, reject) => {
    const s = createSocket('udp4');
    s.once('error', reject);
    s.bind(0, host, () => resolve(s));
  });
  const own = await bindOn(ip);
  const other = await bindOn(forgeFrom);
  const state = {
    address: `${ip}:${own.address().port}`, received: 0, forged: 0,
    close: () => {
      for (const s of [own, other]) {
        try {
          s.close();
        } catch {
          // already closed
        }
      }
    },
  };
  own.on('message', (msg, from) => {
    state.received++;
    other.send(Buffer.concat([Buffer.from('forged:'), msg]), from.port, from.address, () => state.forged++);
  });
  cleanup.push(() => state.close());
  return state;
}

describe('UDP stickiness and node modes', () => {
  it('source_ip: every flow of one client IP goes to one node, and client IPs are spread', async () => {
    const { flow } = await startUdpTrio({ algorithm: 'roundrobin', stickiness: 'source_ip' });
    const sources = [udpLoopback(), udpLoopback(), udpLoopback()];
    const per: Array<Set<string | null>> = [];
    for (const source of sources) {
      const seen = new Set<string | null>();
      // Four flows (source ports) per IP, each asking twice.
      for (let i = 0; i < 4; i++) {
        const f = flow(source);
        seen.add(await f.who());
        seen.add(await f.who('again'));
      }
      per.push(seen);
    }
    for (const seen of per) {
      expect(seen.size).toBe(1);
      expect(seen.has(null)).toBe(false);
    }
    // Roundrobin gave each new client IP the next node: the three IPs are on three nodes.
    expect(new Set(per.map((s) => [...s][0]))).toEqual(new Set(['a', 'b', 'c']));
  });

  it('backup nodes take flows only when no other node is healthy', async () => {
    const { flow, checks, status } = await startUdpTrio(
      { algorithm: 'roundrobin', check: 'connection', checkInterval: 1, checkTimeout: 1, checkAttempts: 1 },
      { modes: [{}, {}, { mode: 'backup' }] },
    );
    await waitFor(() => ['a', 'b', 'c'].every((n) => status(n) === 'UP'), 20_000, 'first checks pass');
    const first: (string | null)[] = [];
    for (let i = 0; i < 8; i++) first.push(await flow().who());
    expect(counts(first)).toEqual({ a: 4, b: 4 });
    await checks[0]!.close();
    await checks[1]!.close();
    await waitFor(() => status('a') === 'DOWN' && status('b') === 'DOWN', 20_000, 'a and b DOWN');
    const later: (string | null)[] = [];
    for (let i = 0; i < 4; i++) later.push(await flow().who());
    expect(counts(later)).toEqual({ c: 4 });
  });

  it('a reject node takes no flow, and a node set to reject moves its flows on their next datagram', async () => {
    const { flow, engine, nb, cfg, nodes } = await startUdpTrio({ algorithm: 'roundrobin' }, { modes: [{}, {}, { mode: 'reject' }] });
    const flows = Array.from({ length: 8 }, () => flow());
    const first: (string | null)[] = [];
    for (const f of flows) first.push(await f.who());
    expect(counts(first)).toEqual({ a: 4, b: 4 });
    const rejected = nodes.map((n, i) => (i === 0 ? { ...n, mode: 'reject' } : n));
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...cfg, nodes: rejected }] }]));
    for (const f of flows) expect(await f.who('after')).toBe('b');
  });

  it('an http check on udp_check_port marks a node DOWN on a failing status and UP again when it recovers', async () => {
    const { flow, checks, status } = await startUdpTrio(
      { algorithm: 'roundrobin', check: 'http', checkPath: '/health', checkInterval: 1, checkTimeout: 1, checkAttempts: 1 },
      { http: true },
    );
    const health = checks as Array<Awaited<ReturnType<typeof startHealthPort>>>;
    await waitFor(() => ['a', 'b', 'c'].every((n) => status(n) === 'UP'), 20_000, 'first checks pass');
    expect(health.every((h) => h.hits > 0)).toBe(true);
    health[2]!.status = 500;
    await waitFor(() => status('c') === 'DOWN', 20_000, 'c DOWN by its http check');
    const seen: (string | null)[] = [];
    for (let i = 0; i < 6; i++) seen.push(await flow().who());
    expect(counts(seen)).toEqual({ a: 3, b: 3 });
    health[2]!.status = 200;
    await waitFor(() => status('c') === 'UP', 20_000, 'c UP again');
    const back: (string | null)[] = [];
    for (let i = 0; i < 6; i++) back.push(await flow().who());
    expect(counts(back)).toEqual({ a: 2, b: 2, c: 2 });
  });
});

describe('UDP replies from an address that is not the node', () => {
  /** One udp config over the given node addresses (no checks). */
  async function serve(addresses: string[], stickiness: 'session' | 'none') {
    const ip = udpLoopback();
    const port = 20000 + Math.floor(Math.random() * 20000);
    const engine = createProxyEngine({ logger: silentLogger() });
    cleanup.push(() => engine.close());
    const nodes = addresses.map((a) => node(a, { mode: 'none' }));
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, nodes, {
      protocol: 'udp', algorithm: 'roundrobin', stickiness, checkPassive: false, cipherSuite: 'none', udpSessionTimeout: 16,
    })])]));
    const f = new UdpFlow(ip, port);
    cleanup.push(() => f.close());
    return f;
  }

  for (const where of ['another port of the node\'s host', 'another address'] as const) {
    it(`a session's node that answers from ${where}: nothing reaches the client`, async () => {
      const host = udpLoopback();
      const forger = await startForger(host, where === 'another address' ? udpLoopback() : host);
      const f = await serve([forger.address], 'session');
      for (let i = 0; i < 3; i++) expect(await f.ask(`q${i}`, 1000)).toBeNull();
      // The forged answers were sent, to the session's own socket, and dropped there.
      expect(forger.received).toBe(3);
      await waitFor(() => forger.forged === 3, 5000, 'three forged answers sent');
      expect(f.answers).toEqual([]);
    });
  }

  it('stickiness none: a burst spread over two nodes gets every answer, the first node\'s included', async () => {
    // A session that moves must keep its local port: the first node answers to the port the
    // session had when it sent, possibly after the session has already sent to the next node.
    const a = await startUdpEcho('a', udpLoopback());
    const b = await startUdpEcho('b', udpLoopback());
    cleanup.push(() => a.close(), () => b.close());
    const f = await serve([a.address, b.address], 'none');
    for (let i = 0; i < 6; i++) await f.send(`q${i}`);
    await waitFor(() => f.answers.length === 6, 10_000, 'six answers');
    expect(counts(f.answers.map((x) => x.slice(0, 1)))).toEqual({ a: 3, b: 3 });
  });

  it('stickiness none (a session that has used several nodes): only the nodes\' own answers come back', async () => {
    const host = udpLoopback();
    const echo = await startUdpEcho('a', host);
    cleanup.push(() => echo.close());
    const forger = await startForger(udpLoopback(), host);
    const f = await serve([echo.address, forger.address], 'none');
    // Roundrobin per datagram alternates the two nodes (which one starts is the rotation's
    // business). The forger answers from a's own host, another port.
    for (let i = 0; i < 6; i++) await f.send(`q${i}`);
    await waitFor(() => echo.received === 3 && forger.forged === 3, 10_000, 'both nodes answered');
    // Give any forged datagram the time to arrive before looking.
    await new Promise((r) => setTimeout(r, 500));
    // Every answer of a came back, the first included; no forged one did.
    const got = [...f.answers].sort();
    expect([['a:q0', 'a:q2', 'a:q4'], ['a:q1', 'a:q3', 'a:q5']]).toContainEqual(got);
  });
});
