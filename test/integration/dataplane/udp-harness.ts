/**
 * The three-node UDP setup udp.test.ts and udp-modes.test.ts share (docs/dataplane.md "UDP"):
 * echo backends a, b and c that answer with their own name, each on its own 127.117.x address
 * with a TCP (or, with `http`, an HTTP) listener on the config's udp_check_port, behind one udp
 * config of a fresh engine. Everything is closed after each test (engine-harness.ts).
 */
import { createProxyEngine, type HealthEvent } from '../../../dataplane/engine.js';
import type { ConnLimitOptions } from '../../../dataplane/throttle/conn-limits.js';
import { silentLogger } from '../../../lib/logger.js';
import { commonTcpPort, startHealthPort, startTcpPort, startUdpEcho, udpLoopback, UdpFlow, type UdpEcho } from '../../helpers/udp.js';
import { cleanup } from './engine-harness.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';

export type UdpConfigExtra = Parameters<typeof config>[2];
type NodeExtra = Parameters<typeof node>[1];

export async function startUdpTrio(extra: UdpConfigExtra, o: {
  /** Per-node additions (e.g. `{ mode: 'backup' }`), in the order a, b, c. */
  modes?: NodeExtra[];
  /** HTTP listeners answering /health on udp_check_port instead of plain TCP ones. */
  http?: boolean;
  nbExtra?: Parameters<typeof nodebalancer>[2];
  limits?: ConnLimitOptions;
  /** EngineOptions.udpNative (default: the engine's, the native path). */
  udpNative?: boolean;
} = {}) {
  const names = ['a', 'b', 'c'];
  const ips = names.map(() => udpLoopback());
  const backends: UdpEcho[] = [];
  for (const [i, n] of names.entries()) backends.push(await startUdpEcho(n, ips[i]!));
  for (const b of backends) cleanup.push(() => b.close());
  const checkPort = await commonTcpPort(ips);
  const checks = await Promise.all(ips.map((ip) => (o.http ? startHealthPort(ip, checkPort) : startTcpPort(ip, checkPort))));
  for (const c of checks) cleanup.push(() => c.close());
  const ip = udpLoopback();
  const port = 20000 + Math.floor(Math.random() * 20000);
  const engine = createProxyEngine({ logger: silentLogger(), limits: o.limits, udpNative: o.udpNative });
  cleanup.push(() => engine.close());
  const events: Array<HealthEvent & { name: string }> = [];
  const nodes = backends.map((b, i) => node(b.address, { mode: 'none', ...o.modes?.[i] }));
  const nameOf = new Map(nodes.map((n, i) => [n.id as number, names[i]!]));
  engine.onHealth((ev) => events.push({ ...ev, name: nameOf.get(ev.nodeId)! }));
  const cfg = config(port, nodes, { protocol: 'udp', stickiness: 'session', checkPassive: false, cipherSuite: 'none', udpCheckPort: checkPort, udpSessionTimeout: 16, ...extra });
  const nb = nodebalancer(ip, [cfg], o.nbExtra ?? {});
  await engine.apply(snapshot(1, [nb]));
  /** A new client flow (its own source port), from `source` if given. */
  const flow = (source?: string) => {
    const f = new UdpFlow(ip, port, source);
    cleanup.push(() => f.close());
    return f;
  };
  const status = (name: string) => [...events].reverse().find((e) => e.name === name)?.status ?? 'unknown';
  return { engine, backends, checks, nodes, cfg, nb, flow, status, ip, port };
}

/** How many times each name occurs (`null`, no answer, counts as "null"). */
export const counts = (names: (string | null)[]) => names.reduce<Record<string, number>>((m, n) => ({ ...m, [String(n)]: (m[String(n)] ?? 0) + 1 }), {});
