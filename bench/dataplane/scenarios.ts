/**
 * The scenarios of the data-plane bench and the targets issue 6 sets for each (ours / HAProxy,
 * same run). Every scenario is one wrk invocation against a listener, the same for both proxies
 * except for the address.
 */
import { PORTS } from './servers.js';
import type { WrkRun } from './wrk.js';

export type Unit = 'req/s' | 'MB/s';

export interface Scenario {
  name: string;
  what: string;
  unit: Unit;
  wrk(ip: string, durationS: number): WrkRun;
  /** Minimum throughput ratio ours/HAProxy, if the issue sets one. */
  minRatio?: number;
  /** Maximum p99 latency ratio ours/HAProxy, if the issue sets one. */
  maxP99Ratio?: number;
  /**
   * With workers (ours) against HAProxy's nbthread, the per-core targets (issue 15): a minimum
   * req/s ratio and a maximum ratio of CPU per request, ours / HAProxy's.
   */
  perCore?: { minRatio?: number; maxCpuRatio: number };
  /**
   * Measured against the bare Node relay too (relay.ts): the maximum ratio of CPU per request,
   * ours / the relay's (the floor any relay on Node's sockets pays for the same work).
   */
  floor?: { maxCpuRatio: number };
}

/** Ours at most this much CPU per request over the bare Node relay doing the same work. */
const FLOOR_RATIO = 1.15;

/** `threads`: wrk threads, one per proxy worker, so that the client is not the bottleneck. */
export function scenarios(connections: number, threads = 1): Scenario[] {
  return withThreads(threads, [
    {
      name: 'http-keepalive',
      what: `HTTP small responses, keep-alive, wrk -c${connections}`,
      unit: 'req/s',
      wrk: (ip, d) => ({ url: `http://${ip}:${PORTS.http}/`, connections, durationS: d }),
      minRatio: 0.8,
      maxP99Ratio: 1.5,
      perCore: { minRatio: 0.9, maxCpuRatio: 1.1 },
      floor: { maxCpuRatio: FLOOR_RATIO },
    },
    {
      name: 'http-close',
      what: `HTTP small responses, new connection per request (Connection: close), -c${connections}`,
      unit: 'req/s',
      wrk: (ip, d) => ({ url: `http://${ip}:${PORTS.http}/`, connections, durationS: d, headers: ['Connection: close'] }),
      perCore: { maxCpuRatio: 1.5 },
      floor: { maxCpuRatio: FLOOR_RATIO },
    },
    {
      name: 'tcp-small',
      what: `TCP small request/response (HTTP exchanges through a tcp config), -c${connections}`,
      unit: 'req/s',
      wrk: (ip, d) => ({ url: `http://${ip}:${PORTS.tcp}/`, connections, durationS: d }),
      minRatio: 0.9,
      perCore: { minRatio: 0.9, maxCpuRatio: 1.1 },
      floor: { maxCpuRatio: FLOOR_RATIO },
    },
    {
      name: 'tcp-bulk',
      what: 'TCP bulk: 50 MB downloads through a tcp config, one connection',
      unit: 'MB/s',
      wrk: (ip, d) => ({ url: `http://${ip}:${PORTS.tcp}/big`, connections: 1, durationS: d, timeoutS: 20 }),
      minRatio: 0.9,
    },
    {
      name: 'https-keepalive',
      what: `HTTPS small responses, keep-alive, TLS terminated by the proxy, -c${connections}`,
      unit: 'req/s',
      wrk: (ip, d) => ({ url: `https://${ip}:${PORTS.https}/`, connections, durationS: d }),
      minRatio: 0.7,
      perCore: { minRatio: 0.9, maxCpuRatio: 1.1 },
      floor: { maxCpuRatio: FLOOR_RATIO },
    },
  ]);
}

function withThreads(threads: number, list: Scenario[]): Scenario[] {
  return list.map((s) => ({ ...s, wrk: (ip, d) => ({ ...s.wrk(ip, d), threads: Math.min(threads, s.wrk(ip, d).connections) }) }));
}
