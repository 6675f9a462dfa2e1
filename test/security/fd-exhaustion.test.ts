import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { ask, echoBackend } from '../helpers/tcp.js';
import { config, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';
import { startDataplaneProcess, type DataplaneProcess } from './dataplane-process.js';

const NOFILE = 4096;

/**
 * One client IP takes the whole data plane down (docs/security/traffic.md): idle connections
 * until every descriptor is used, after which no NodeBalancer on that data plane accepts anyone.
 * The data plane runs with 4,096 descriptors so that 12,000 attempts are more than enough. It
 * must keep serving other NodeBalancers' clients, keep its health checks running, and answer
 * /metrics, whether the attack comes from one address (client caps) or from many (the
 * NodeBalancer cap, then the descriptor budget with its reserve).
 */
describe('descriptor exhaustion', () => {
  let dp: DataplaneProcess;
  let victimBackend: TcpBackend;
  let otherBackend: TcpBackend;
  const victimIp = loopback();
  const victim2Ip = loopback();
  const otherIp = loopback();
  const port = 7302;
  const client = loopback();
  const held: Socket[] = [];

  let attempts = 0;
  /** Every connection attempt so far has been admitted or refused by the data plane. */
  async function accountedFor(): Promise<number> {
    let seen = 0;
    for (const line of (await dp.metrics()).split('\n')) {
      if (line.startsWith('fulcrum_dataplane_connections_total{') || line.startsWith('fulcrum_dataplane_connections_refused_total{')) seen += Number(line.slice(line.lastIndexOf(' ') + 1));
    }
    return seen;
  }
  async function settled(): Promise<void> {
    // A data plane out of descriptors leaves attempts in its backlog and never decides on them.
    await waitFor(async () => (await accountedFor()) >= attempts, 20_000, 'every attempt admitted or refused');
  }

  /** Opens `n` connections from `from`, keeps them, and waits until the data plane decided on each. */
  async function flood(host: string, from: string, n: number): Promise<void> {
    attempts += n;
    await Promise.all(Array.from({ length: n }, () => new Promise<void>((resolve) => {
      const s = connect({ host, port, localAddress: from });
      held.push(s);
      s.on('error', () => undefined);
      s.once('close', () => resolve());
      s.once('connect', () => resolve());
      // A data plane out of descriptors leaves handshakes in its backlog: do not wait for them.
      setTimeout(resolve, 5000).unref();
    })));
    await settled();
  }

  /** Connections the data plane holds for us (the refused ones were reset). */
  async function admitted(): Promise<number> {
    await waitFor(async () => held.filter((s) => !s.destroyed).length === (await dp.metric('fulcrum_dataplane_open_connections')), 10_000, 'client and data plane agree');
    return held.filter((s) => !s.destroyed).length;
  }

  const closeHeld = async () => {
    for (const s of held.splice(0)) s.destroy();
    await waitFor(async () => (await dp.metric('fulcrum_dataplane_open_connections')) === 0, 20_000, 'attack connections closed');
  };

  async function otherServed(): Promise<void> {
    attempts++;
    expect(await ask(otherIp, port, 'hi', { localAddress: client, timeoutMs: 5000 })).toBe('o:hi');
  }

  beforeAll(async () => {
    victimBackend = await echoBackend(loopback(), 'v');
    otherBackend = await echoBackend(loopback(), 'o');
    const checked = { check: 'connection' as const, checkInterval: 2, checkTimeout: 1, checkAttempts: 2 };
    dp = await startDataplaneProcess(snapshot(1, [
      nodebalancer(victimIp, [config(port, [node(`${victimBackend.ip}:${victimBackend.port}`)])]),
      nodebalancer(victim2Ip, [config(port, [node(`${victimBackend.ip}:${victimBackend.port}`)])]),
      nodebalancer(otherIp, [config(port, [node(`${otherBackend.ip}:${otherBackend.port}`)], checked)]),
    ]), { nofile: NOFILE, flags: ['--max-conns-per-nodebalancer', '1000'] });
    await waitFor(() => ask(otherIp, port, 'x', { localAddress: client }).then(() => true, () => false), 20_000, 'listeners up');
    attempts = await accountedFor();
    // The checked node of the other NodeBalancer is UP; the victims' nodes (no check, no traffic
    // yet) stay unknown until something sees them.
    const upNodes = async () => (await dp.metrics()).split('\n').filter((l) => l.startsWith('fulcrum_dataplane_node_up{') && l.endsWith(' 1')).length;
    await waitFor(async () => (await upNodes()) === 1, 10_000, 'node UP');
  });
  afterAll(async () => {
    for (const s of held) s.destroy();
    await dp?.stop();
    await victimBackend?.close();
    await otherBackend?.close();
  });

  it('12,000 attempts from one address leave other NodeBalancers served', async () => {
    const attacker = loopback();
    for (let batch = 0; batch < 12; batch++) {
      await flood(batch % 2 === 0 ? victimIp : victim2Ip, attacker, 1000);
      await otherServed();
    }
    // 100 per NodeBalancer per client address.
    expect(await admitted()).toBe(200);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="client_cap"')).toBe(11_800);
    expect(await dp.metric('fulcrum_dataplane_node_up')).toBe(1);
    await closeHeld();
  });

  it('many addresses fill the NodeBalancer cap, then the descriptor budget; the reserve keeps checks and /metrics alive', async () => {
    // 15 addresses x 100 on the first victim: its NodeBalancer cap (1,000 here) holds.
    for (let i = 0; i < 15; i++) await flood(victimIp, loopback(), 100);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="nodebalancer_cap"')).toBe(500);
    await otherServed();
    // 10 more on the second victim: (4,096 - reserve 1,024 - 3 listeners) / 2 = 1,534 client
    // connections fit; the rest are refused before descriptors run out.
    for (let i = 0; i < 10; i++) await flood(victim2Ip, loopback(), 100);
    expect(await admitted()).toBe(1534);
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="fd_reserve"')).toBe(466);
    // While the budget is full, health checks keep running on the reserve: the other
    // NodeBalancer's node is probed and stays UP (a DOWN would take 2 failed probes, 4 s).
    const probes = otherBackend.connections;
    await waitFor(() => otherBackend.connections >= probes + 3, 15_000, 'three more health probes');
    expect(await dp.metric('fulcrum_dataplane_node_up')).toBe(1);
    await closeHeld();
    await otherServed();
  });
});
