import { execFile } from 'node:child_process';
import { createSocket, type Socket } from 'node:dgram';
import { readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { waitFor } from '../../helpers/backends.js';
import { commonTcpPort, startTcpPort, startUdpEcho, udpLoopback, UdpFlow } from '../../helpers/udp.js';
import { startDataplaneProcess, type DataplaneProcess } from '../../security/dataplane-process.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';

/**
 * UDP under a data plane of two worker processes, the real CLI with `--workers 2`.
 * docs/dataplane.md "UDP on every worker": each worker reads its own socket of the port's
 * reuseport group (the primary holds the group), so the kernel keeps a flow with one worker,
 * a reload's new worker k takes over socket k, and the UDP limits are divided over the workers.
 * Addresses: 127.117.0.0/16.
 */
const run = promisify(execFile);
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

/**
 * Which of `pids` holds the UDP socket bound to local port `port` (whatever its local address):
 * a session's socket towards the node, which only the worker that opened the session has.
 */
function ownerOf(port: number, pids: number[]): number | undefined {
  const hex = `:${port.toString(16).toUpperCase().padStart(4, '0')}`;
  // Any local address: other sockets on the host may share the port number on another address.
  const inodes = new Set(readFileSync('/proc/net/udp', 'utf8').split('\n').map((l) => l.trim().split(/\s+/)).filter((f) => f[1]?.endsWith(hex)).map((f) => `socket:[${f[9]}]`));
  return pids.find((pid) => {
    try {
      return readdirSync(`/proc/${pid}/fd`).some((fd) => {
        try {
          return inodes.has(readlinkSync(`/proc/${pid}/fd/${fd}`));
        } catch {
          return false;
        }
      });
    } catch {
      return false;
    }
  });
}

/**
 * ownerOf, read again until it finds the socket (10 s at most). /proc/net/udp is read in pages,
 * and the kernel resumes each page by counting sockets from the start of its table: when other
 * sockets of the host open or close between two pages (other tests running beside this one), a
 * socket can be skipped in that read. The session socket is there; only the listing missed it.
 */
async function settledOwnerOf(port: number, pids: number[]): Promise<number | undefined> {
  const deadline = Date.now() + 10_000;
  for (;;) {
    const owner = ownerOf(port, pids);
    if (owner !== undefined || Date.now() > deadline) return owner;
    await new Promise((r) => setTimeout(r, 50));
  }
}

/** A UDP node that answers each datagram with the source port it came from: which session sent it. */
async function portEcho(ip: string): Promise<{ address: string; close(): void }> {
  const sock: Socket = createSocket('udp4');
  sock.on('message', (_msg, from) => sock.send(String(from.port), from.port, from.address));
  await new Promise<void>((r) => sock.bind(0, ip, () => r()));
  return { address: `${ip}:${sock.address().port}`, close: () => sock.close() };
}

async function start(ip: string, port: number, nodeIps: string[], nodes: string[], nbExtra: Record<string, number> = {}): Promise<DataplaneProcess> {
  const checkPort = await commonTcpPort(nodeIps);
  for (const nip of nodeIps) {
    const c = await startTcpPort(nip, checkPort);
    cleanup.push(() => c.close());
  }
  const dp = await startDataplaneProcess(snapshot(1, [nodebalancer(ip, [config(port, nodes.map((a) => node(a, { mode: 'none' })), {
    protocol: 'udp', algorithm: 'roundrobin', stickiness: 'session', checkPassive: false, cipherSuite: 'none', udpCheckPort: checkPort, udpSessionTimeout: 16,
  })], nbExtra)]), { flags: ['--workers', '2'] });
  cleanup.push(() => dp.stop());
  await waitFor(() => workerPids(dp.pid).length === 2, 30_000, 'two workers');
  return dp;
}

const counts = (names: (string | null)[]) => names.reduce<Record<string, number>>((m, n) => ({ ...m, [String(n)]: (m[String(n)] ?? 0) + 1 }), {});

describe('udp under two workers', () => {
  it('serves flows on both workers, each flow on one session of one worker; a reload and a killed worker keep every flow with its slot', async () => {
    const nodeIp = udpLoopback();
    const echo = await portEcho(nodeIp);
    cleanup.push(() => echo.close());
    const ip = udpLoopback();
    const port = 20000 + Math.floor(Math.random() * 20000);
    const dp = await start(ip, port, [nodeIp], [echo.address]);
    const flows = Array.from({ length: 24 }, () => {
      const f = new UdpFlow(ip, port);
      cleanup.push(() => f.close());
      return f;
    });
    await waitFor(() => flows[0]!.ask('probe', 500), 30_000, 'the udp listener');

    // Each flow's datagrams all leave from one session socket, and that socket is in one worker.
    const owners = async (tag: string, pids: number[]) => {
      const out: number[] = [];
      for (const [i, f] of flows.entries()) {
        const seen = new Set<string | null>();
        for (let k = 0; k < 3; k++) seen.add(await f.ask(`${tag}-${k}`, 5000));
        expect([...seen], `flow ${i}`).toHaveLength(1);
        const sessionPort = [...seen][0];
        expect(sessionPort, `flow ${i} answered`).not.toBeNull();
        const owner = await settledOwnerOf(Number(sessionPort), pids);
        expect(owner, `flow ${i}: the worker holding session port ${sessionPort}`).toBeDefined();
        out.push(owner!);
      }
      return out;
    };
    const before = workerPids(dp.pid);
    const first = await owners('a', before);
    // 24 flows, two workers: the kernel's hash puts flows on both (all on one: 2 in 2^24).
    expect(new Set(first).size, `owners: ${JSON.stringify(counts(first.map(String)))}`).toBe(2);
    const slotsBefore = first.map((p) => slotOf(p));

    // Reload: a new generation takes over the same sockets; once the old one is gone every flow is
    // answered again, still by one session each, from the worker in the same slot as before (the
    // group kept its size, so the kernel's choice for each flow did not move).
    await run(process.execPath, [join(process.cwd(), 'bin', 'fulcrum.js'), 'dataplane', 'reload', '--state', dp.stateDir], { env: { ...process.env, FULCRUM_FROM_SOURCE: '1' } });
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && now.every((p) => !before.includes(p));
    }, 60_000, 'the old workers gone');
    const after = workerPids(dp.pid);
    const second = await owners('b', after);
    expect(second.map((p) => slotOf(p))).toEqual(slotsBefore);

    // Slot 0's worker killed: the primary still holds socket 0, so the group keeps its size and
    // slot 1's flows stay on their sessions; slot 0's flows are served again by its replacement.
    const ports = async () => Promise.all(flows.map((f) => f.ask('c', 5000)));
    const portsBefore = await ports();
    const victim = after.find((p) => slotOf(p) === 0)!;
    process.kill(victim, 'SIGKILL');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && !now.includes(victim);
    }, 30_000, 'a replacement for slot 0');
    // The replacement reads socket 0 once it has applied the snapshot: until then slot 0's
    // datagrams wait in the socket's buffer or are dropped.
    for (const f of flows) await waitFor(() => f.ask('wake', 2000), 60_000, 'every flow answered again');
    const third = await owners('d', workerPids(dp.pid));
    expect(third.map((p) => slotOf(p))).toEqual(slotsBefore);
    const portsAfter = await ports();
    for (const [i, slot] of slotsBefore.entries()) {
      if (slot === 1) expect(portsAfter[i], `flow ${i} on slot 1 kept its session`).toBe(portsBefore[i]);
    }
  }, 150_000);

  it('keeps client_udp_sess_throttle for the whole data plane, and every node in rotation, with flows on both workers', async () => {
    const names = ['a', 'b', 'c'];
    const ips = names.map(() => udpLoopback());
    const backends = [];
    for (const [i, n] of names.entries()) backends.push(await startUdpEcho(n, ips[i]!));
    for (const b of backends) cleanup.push(() => b.close());
    const ip = udpLoopback();
    const port = 20000 + Math.floor(Math.random() * 20000);
    // 10 new sessions a second per client: 5 in each worker.
    await start(ip, port, ips, backends.map((b) => b.address), { clientUdpSessThrottle: 10 });
    const flow = () => {
      const f = new UdpFlow(ip, port);
      cleanup.push(() => f.close());
      return f;
    };
    await waitFor(() => flow().who('probe', 500), 30_000, 'the udp listener');
    // Past the probe's second: the throttle's window is empty again.
    await new Promise((r) => setTimeout(r, 1100));

    // 40 new flows of one client at once: at most 10 are admitted within the second.
    const burst = Array.from({ length: 40 }, flow);
    await Promise.all(burst.map((f) => f.ready));
    const answers = await Promise.all(burst.map((f) => f.who('burst', 3000)));
    const admitted = answers.filter((a) => a !== null).length;
    expect(admitted, `answers: ${JSON.stringify(counts(answers))}`).toBeGreaterThan(0);
    expect(admitted).toBeLessThanOrEqual(10);

    // Roundrobin rotates in each worker: over 24 new flows, spaced so the throttle admits them,
    // every node is used, and each flow keeps its node.
    const flows: UdpFlow[] = [];
    const first: (string | null)[] = [];
    for (let i = 0; i < 24; i++) {
      const f = flow();
      flows.push(f);
      first.push(await waitFor(() => f.who('rr', 1000), 30_000, 'a flow admitted'));
      await new Promise((r) => setTimeout(r, 120));
    }
    expect(Object.keys(counts(first)).sort()).toEqual(names);
    for (const [i, f] of flows.entries()) expect(await f.who('again', 5000)).toBe(first[i]);
  }, 150_000);
});
