import { readFileSync } from 'node:fs';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../helpers/backends.js';
import { commonTcpPort, startTcpPort, startUdpEcho, udpLoopback, UdpFlow } from '../../helpers/udp.js';
import { startDataplaneProcess } from '../../security/dataplane-process.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';

/**
 * UDP under a data plane of two worker processes, the real CLI with `--workers 2` (the production
 * default is one worker per core). docs/dataplane.md "Workers": udp is served by worker 0 only,
 * since a flow is a session that must stay in one process. Addresses: 127.117.0.0/16.
 */
const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** The worker pids of a primary (its child processes). */
function workerPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/** A worker's slot, from the settings the primary forked it with. */
function slotOf(pid: number): number | undefined {
  try {
    const env = readFileSync(`/proc/${pid}/environ`, 'utf8').split('\0').find((e) => e.startsWith('FULCRUM_DATAPLANE_WORKER='));
    return env === undefined ? undefined : (JSON.parse(env.slice(env.indexOf('=') + 1)) as { slot: number }).slot;
  } catch {
    return undefined;
  }
}

const counts = (names: (string | null)[]) => names.reduce<Record<string, number>>((m, n) => ({ ...m, [String(n)]: (m[String(n)] ?? 0) + 1 }), {});

describe('udp under two workers', () => {
  it('answers every flow, keeps each flow on its node, rotates once for the whole data plane, and survives worker 0 being killed', async () => {
    const names = ['a', 'b', 'c'];
    const ips = names.map(() => udpLoopback());
    const backends = [];
    for (const [i, n] of names.entries()) backends.push(await startUdpEcho(n, ips[i]!));
    for (const b of backends) cleanup.push(() => b.close());
    const checkPort = await commonTcpPort(ips);
    for (const ip of ips) {
      const c = await startTcpPort(ip, checkPort);
      cleanup.push(() => c.close());
    }
    const ip = udpLoopback();
    const port = 20000 + Math.floor(Math.random() * 20000);
    const nodes = backends.map((b) => node(b.address, { mode: 'none' }));
    const dp = await startDataplaneProcess(snapshot(1, [nodebalancer(ip, [config(port, nodes, {
      protocol: 'udp', algorithm: 'roundrobin', stickiness: 'session', checkPassive: false, cipherSuite: 'none', udpCheckPort: checkPort, udpSessionTimeout: 16,
    })])]), { flags: ['--workers', '2'] });
    cleanup.push(() => dp.stop());
    await waitFor(() => workerPids(dp.pid).length === 2, 30_000, 'two workers');
    const flow = () => {
      const f = new UdpFlow(ip, port);
      cleanup.push(() => f.close());
      return f;
    };
    await waitFor(() => flow().who('probe', 500), 30_000, 'the udp listener');

    // Thirty new flows after the probe: one roundrobin for the whole data plane spreads them
    // evenly (two workers each rotating would not be asked about every flow).
    const flows = Array.from({ length: 30 }, flow);
    const first: (string | null)[] = [];
    for (const f of flows) first.push(await f.who());
    expect(first.every((n) => n !== null)).toBe(true);
    expect(Object.values(counts(first)).sort()).toEqual([10, 10, 10]);
    // Every datagram of a flow reaches the same node (one process holds the session).
    for (let round = 0; round < 3; round++) {
      for (const [i, f] of flows.entries()) expect(await f.who(`again-${round}`)).toBe(first[i]);
    }

    // Worker 0 killed: the replacement in its slot serves udp again, with new sessions that stick.
    const before = workerPids(dp.pid);
    const zero = before.find((p) => slotOf(p) === 0);
    expect(zero, `slots: ${before.map((p) => `${p}=${slotOf(p)}`).join(' ')}`).toBeDefined();
    process.kill(zero!, 'SIGKILL');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && !now.includes(zero!) && now.some((p) => slotOf(p) === 0);
    }, 30_000, 'a replacement worker 0');
    const fresh = Array.from({ length: 6 }, flow);
    const again: (string | null)[] = [];
    for (const f of fresh) again.push(await waitFor(() => f.who('back', 500), 30_000, 'udp served again'));
    expect(Object.values(counts(again)).sort()).toEqual([2, 2, 2]);
    for (const [i, f] of fresh.entries()) expect(await f.who('sticky')).toBe(again[i]);
  }, 120_000);
});
