import { spawn, type ChildProcess } from 'node:child_process';
import { createSocket } from 'node:dgram';
import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { connect, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { ask, echoBackend } from '../helpers/tcp.js';
import { startUdpEcho, udpLoopback, UdpFlow, type UdpEcho } from '../helpers/udp.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';
import { startDataplaneProcess, type DataplaneProcess } from './dataplane-process.js';
import { createNetns, type Netns, type NetnsPeer } from './netns-peer.js';

/**
 * Limits one client escaped (docs/security/traffic.md "Client keys" and "UDP"), each attack
 * performed against a real data plane process:
 * - UDP sessions were not in the per-client total: one address held 2,000 (16,000 on premium)
 *   sessions per UDP NodeBalancer, on as many NodeBalancers as it found;
 * - nothing limited how fast one address opened UDP sessions;
 * - a session passed every reply of the backend to a source that sent one datagram (a spoofed
 *   source gets them: reflection);
 * - every per-client limit keyed on the full IPv6 address, so one host with a /64 was unlimited:
 *   shown with addresses of a /64 on `lo` in a network namespace of this file's own (the root
 *   namespace has `::1` only), for the data plane's UDP total and the API's per-address rate.
 */
const udp = { protocol: 'udp' as const, stickiness: 'session' as const, check: 'none' as const, checkPassive: false, cipherSuite: 'none' as const, udpCheckPort: 9, udpSessionTimeout: 16 };

/**
 * `n` new flows from `source` (each its own socket and port), one datagram each, at once: how many
 * were answered. Done when every flow is answered or, with `refused` (a refusal counter of the
 * data plane), when answers and new refusals add up to `n`; else at `deadlineMs`. No guessed wait.
 */
async function flows(ip: string, port: number, source: string, n: number, opened: UdpFlow[], o: { refused?: () => Promise<number | undefined>; deadlineMs?: number } = {}): Promise<number> {
  const before = (await o.refused?.()) ?? 0;
  const fs = Array.from({ length: n }, () => new UdpFlow(ip, port, source));
  opened.push(...fs);
  await Promise.all(fs.map((f) => f.send('ping')));
  const answered = () => fs.filter((f) => f.answers.length > 0).length;
  const deadline = Date.now() + (o.deadlineMs ?? 15_000);
  while (Date.now() < deadline) {
    if (answered() === n) break;
    if (o.refused && answered() + ((await o.refused()) ?? 0) - before >= n) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  return answered();
}

describe('UDP sessions in the per-client total, reply bound', () => {
  let dp: DataplaneProcess;
  let echo: UdpEcho;
  let tcpBackend: TcpBackend;
  const chatty = createSocket('udp4');
  let chattyPort = 0;
  const [nb1, nb2, nbTcp, nbChatty] = [loopback(), loopback(), loopback(), loopback()];
  const port = 20000 + Math.floor(Math.random() * 20000);
  const opened: UdpFlow[] = [];
  const held: Socket[] = [];

  const totalCap = () => dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="udp_client_total_cap"');

  beforeAll(async () => {
    echo = await startUdpEcho('e', udpLoopback());
    tcpBackend = await echoBackend(loopback(), 'b');
    // A backend that answers each datagram with 10 of 200 bytes: what a reflector is after.
    const chattyIp = udpLoopback();
    chatty.on('message', (_m, from) => {
      for (let i = 0; i < 10; i++) chatty.send(Buffer.alloc(200, 'r'), from.port, from.address);
    });
    await new Promise<void>((r) => chatty.bind(0, chattyIp, () => r()));
    chattyPort = chatty.address().port;
    const udpNb = (ip: string, backend: string) => nodebalancer(ip, [config(port, [node(backend, { mode: 'none' })], udp)]);
    // A total of 2 connections per client: 32 UDP sessions (a session weighs 1/16).
    dp = await startDataplaneProcess(snapshot(1, [
      udpNb(nb1, echo.address), udpNb(nb2, echo.address), udpNb(nbChatty, `${chattyIp}:${chattyPort}`),
      nodebalancer(nbTcp, [config(port, [node(`${tcpBackend.ip}:${tcpBackend.port}`)])]),
    ]), { flags: ['--max-conns-per-client-total', '2'] });
    const probe = loopback();
    await waitFor(async () => (await flows(nb1, port, probe, 1, opened, { deadlineMs: 1000 })) === 1 && (await flows(nb2, port, probe, 1, opened, { deadlineMs: 1000 })) === 1, 20_000, 'udp listeners up');
  }, 60_000);
  afterAll(async () => {
    for (const f of opened) f.close();
    for (const s of held) s.destroy();
    chatty.close();
    await dp?.stop();
    await echo?.close();
    await tcpBackend?.close();
  });

  it('counts one address\'s sessions over NodeBalancers and source ports, with its connections, and refuses past the total', async () => {
    const attacker = loopback();
    // One connection (16 units of the client's 32) held open.
    const conn = connect({ host: nbTcp, port, localAddress: attacker });
    held.push(conn);
    await new Promise<void>((resolve, reject) => conn.once('connect', resolve).once('error', reject));
    await waitFor(async () => (await dp.metric('fulcrum_dataplane_open_connections')) === 1, 10_000, 'the connection admitted');

    // 12 flows to each of two NodeBalancers, each flow from its own source port: 16 fit.
    const answered = (await flows(nb1, port, attacker, 12, opened, { refused: totalCap })) + (await flows(nb2, port, attacker, 12, opened, { refused: totalCap }));
    expect(answered).toBe(16);
    expect(await totalCap()).toBe(8);
    // Another address is served meanwhile.
    expect(await flows(nb1, port, loopback(), 3, opened)).toBe(3);

    // The connection's share comes back when it closes: 16 more sessions, and not one more.
    conn.destroy();
    await waitFor(async () => (await dp.metric('fulcrum_dataplane_open_connections')) === 0, 10_000, 'the connection closed');
    expect(await flows(nb2, port, attacker, 16, opened, { refused: totalCap })).toBe(16);
    expect(await flows(nb1, port, attacker, 1, opened, { refused: totalCap })).toBe(0);
    expect(await totalCap()).toBe(9);
    // And a connection no longer fits beside 32 sessions.
    // Cut by the data plane (the refusal counted below), not refused by the kernel or timed out.
    await expect(ask(nbTcp, port, 'x', { localAddress: attacker, timeoutMs: 2000 })).rejects.toThrow(/ECONNRESET|closed without an answer/);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="client_total_cap"')).toBe(1);
  }, 60_000);

  it('passes at most 4 replies to a source that sent one datagram, all of them once it sends again', async () => {
    const client = createSocket('udp4');
    let got = 0;
    client.on('message', () => got++);
    await new Promise<void>((r) => client.bind(0, loopback(), () => r()));
    try {
      client.send('one', port, nbChatty);
      await waitFor(() => got >= 4, 10_000, 'the first replies');
      // The backend sent 10; give the other 6 time to arrive, were they passed.
      await new Promise((r) => setTimeout(r, 1000));
      expect(got).toBe(4);
      client.send('two', port, nbChatty);
      await waitFor(() => got === 14, 10_000, 'every reply to the second datagram');
    } finally {
      client.close();
    }
  }, 30_000);
});

describe('new UDP sessions per client a second', () => {
  let dp: DataplaneProcess;
  let echo: UdpEcho;
  const nb = loopback();
  const port = 20000 + Math.floor(Math.random() * 20000);
  const opened: UdpFlow[] = [];

  beforeAll(async () => {
    echo = await startUdpEcho('e', udpLoopback());
    dp = await startDataplaneProcess(snapshot(1, [nodebalancer(nb, [config(port, [node(echo.address, { mode: 'none' })], udp)])]), {
      flags: ['--udp-new-sessions-per-client', '10'],
    });
    const probe = loopback();
    await waitFor(async () => (await flows(nb, port, probe, 1, opened, { deadlineMs: 1000 })) === 1, 20_000, 'udp listener up');
  }, 60_000);
  const rate = () => dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="udp_rate"');
  afterAll(async () => {
    for (const f of opened) f.close();
    await dp?.stop();
    await echo?.close();
  });

  it('refuses one address\'s burst of new flows past its bucket, serves others, and refills', async () => {
    const attacker = loopback();
    // 10 a second with a bucket of 2 seconds' worth: 20 at once, plus what refills meanwhile.
    const answered = await flows(nb, port, attacker, 60, opened, { refused: rate });
    expect(answered).toBeGreaterThanOrEqual(20);
    expect(answered).toBeLessThan(45);
    expect(await rate()).toBe(60 - answered);
    expect(await flows(nb, port, loopback(), 5, opened)).toBe(5);
    // A rate, not a lifetime cap: the attacker's address gets new sessions again.
    await waitFor(async () => (await flows(nb, port, attacker, 1, opened, { refused: rate })) === 1, 15_000, 'a new flow after the refill');
  }, 60_000);
});

describe('an IPv6 client is its /64', () => {
  const ns = `fck${process.pid % 100_000}`;
  // 2001:db8::/32 is for documentation: nothing outside this namespace routes it.
  const net = '2001:db8:4b1d';
  const nbV6 = `${net}:1::100`;
  const apiV6 = `${net}:1::1`;
  const oneHost = [`${net}:2::1`, `${net}:2::2`, `${net}:2::3`];
  const otherHost = `${net}:3::1`;
  let netns: Netns;
  let peer: NetnsPeer;
  let dp: DataplaneProcess;
  let cp: ChildProcess | undefined;
  let cpState = '';
  const port = 20000 + Math.floor(Math.random() * 20000);

  beforeAll(async () => {
    netns = createNetns(ns, [nbV6, apiV6, ...oneHost, otherHost]);
    peer = await netns.peer();
    const echoPort = await peer.echo();
    // A total of 1 connection per client: 16 UDP sessions.
    dp = await startDataplaneProcess(snapshot(1, [
      nodebalancer('127.0.0.2', [config(port, [node(`127.0.0.1:${echoPort}`, { mode: 'none' })], udp)], { ipv6: nbV6 }),
    ]), { flags: ['--max-conns-per-client-total', '1'], inside: { run: netns.run, text: (url) => peer.text(url) } });
    await waitFor(async () => (await peer.udp(nbV6, port, ['::1'], 1, 1000))['::1'] === 1, 20_000, 'udp listener up on the IPv6 address');
  }, 60_000);
  afterAll(async () => {
    cp?.kill('SIGKILL');
    await dp?.stop();
    netns?.remove();
    if (cpState) rmSync(cpState, { recursive: true, force: true });
  });

  it('data plane: three addresses of one /64 share one client total; another /64 is another client', async () => {
    // Answers past the cap would come within a fraction of a second; 3 s is generous.
    const got = await peer.udp(nbV6, port, oneHost, 8, 3000);
    expect(oneHost.reduce((a, h) => a + got[h]!, 0)).toBe(16);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="udp_client_total_cap"')).toBe(8);
    expect((await peer.udp(nbV6, port, [otherHost], 8, 10_000))[otherHost]).toBe(8);
  }, 30_000);

  it('API: three addresses of one /64 share one per-address rate limit', async () => {
    cpState = mkdtempSync(join(tmpdir(), 'fulcrum-sec-cp-'));
    const [cmd, args] = netns.run(process.execPath, [join(process.cwd(), 'bin', 'fulcrum.js'), 'control-plane', '--state', cpState,
      '--api-host', '::', '--api-insecure-listen', '--api-port', '0', '--grpc-host', '127.0.0.1', '--grpc-port', '0', '--insecure-grpc', '--api-ip-rate-limit', '4']);
    let out = '';
    cp = spawn(cmd, args, { env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    cp.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    cp.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const info = join(cpState, 'control-plane.json');
    let apiPort = 0;
    await waitFor(() => {
      if (cp!.exitCode !== null) throw new Error(`control plane exited: ${out}`);
      if (!existsSync(info)) return false;
      try {
        apiPort = Number((JSON.parse(readFileSync(info, 'utf8')) as { apiUrl: string }).apiUrl.split(':').pop());
      } catch {
        return false;
      }
      return apiPort > 0;
    }, 60_000, 'control plane started');
    const url = `http://[${apiV6}]:${apiPort}/v4/nodebalancers`;
    // No token: 401 while the address may ask, 429 once its client has spent the limit.
    const statuses = await peer.http(url, [...oneHost, ...oneHost]);
    expect(statuses).toEqual([401, 401, 401, 401, 429, 429]);
    expect(await peer.http(url, [otherHost])).toEqual([401]);
  }, 90_000);
});
