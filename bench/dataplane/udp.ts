/**
 * The UDP scenario of `npm run bench:dataplane` (`--only udp` runs it alone): our data plane's
 * udp config against nginx's `stream` UDP proxy (as many workers as ours, `reuseport` above one), both in front of the same two UDP
 * echo backends, roundrobin, no health checks. The load is closed-loop: each of N flows (its own
 * source port, so its own session on both proxies) sends a 64-byte datagram and waits for the
 * answer before the next one. Printed: datagrams/s, p50/p99 round trip, proxy CPU, and the ratio
 * to nginx against the 0.8 target.
 */
import { createSocket, type Socket } from 'node:dgram';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { cpuTimes, startProcess, waitFor, type Spawned } from '../common/processes.js';
import type { Api } from '../common/fulcrum.js';
import { fmt, median, percentile, table } from '../common/stats.js';
import { nginxMain } from './servers.js';

export const UDP_BACKENDS = ['127.0.61.1', '127.0.61.2'];
export const UDP_BACKEND_PORT = 9053;
export const NGINX_UDP_IP = '127.0.71.1';
export const UDP_PORT = 8053;
const PAYLOAD = Buffer.alloc(64, 0x75);
const TARGET = 0.8;

/**
 * One echo process per backend address (Node's dgram: answers each datagram with itself), on
 * `port`. The udp scenario's own addresses unless told others (udp-floor.ts has its own).
 */
export function startEchoBackends(dir: string, ips: readonly string[] = UDP_BACKENDS, port = UDP_BACKEND_PORT): Spawned[] {
  const code = `const s=require('node:dgram').createSocket('udp4');s.on('message',(m,r)=>s.send(m,r.port,r.address));s.bind(${port},process.argv[1]);`;
  return ips.map((ip, i) => startProcess(`udp-echo-${i + 1}`, process.execPath, ['-e', code, ip], dir));
}

/**
 * nginx's `stream` UDP proxy on ip:port in front of `backends` (roundrobin): one worker, or
 * `workers` with `reuseport` (each worker its own socket of the port, as ours with --workers N).
 */
export function startNginxUdp(dir: string, nginxBin: string, o: { ip: string; port: number; backends: readonly string[]; backendPort: number } = {
  ip: NGINX_UDP_IP, port: UDP_PORT, backends: UDP_BACKENDS, backendPort: UDP_BACKEND_PORT,
}, workers = 1): Spawned {
  const conf = join(dir, 'nginx-udp.conf');
  writeFileSync(conf, `
load_module /usr/lib/nginx/modules/ngx_stream_module.so;
${nginxMain(dir, 'nginx-udp', 16384, workers)}
stream {
  upstream udp_nodes {
    ${o.backends.map((ip) => `server ${ip}:${o.backendPort};`).join('\n    ')}
  }
  server {
    listen ${o.ip}:${o.port} udp${workers > 1 ? ' reuseport' : ''};
    proxy_pass udp_nodes;
    proxy_timeout 16s;
  }
}
`);
  return startProcess('nginx-udp', nginxBin, ['-c', conf, '-p', dir], dir);
}

/** Resolves when ip:port answers a datagram (the proxy and a backend are up). */
export function answers(ip: string, port: number, timeoutMs = 500): Promise<true | undefined> {
  return new Promise((resolve) => {
    const s = createSocket('udp4');
    const done = (v: true | undefined) => {
      clearTimeout(t);
      s.close();
      resolve(v);
    };
    const t = setTimeout(() => done(undefined), timeoutMs);
    s.on('message', () => done(true));
    s.on('error', () => done(undefined));
    s.send(PAYLOAD, port, ip);
  });
}

/**
 * CPU seconds (user + system) of a process and of each of its direct children, by pid (nginx's
 * work is done by its worker, a child of the master; our data plane's by its workers).
 */
function treeCpu(pid: number): Map<number, number> {
  let kids: number[] = [];
  try {
    kids = readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    // No children file (not Linux): the process alone.
  }
  const out = new Map<number, number>();
  for (const p of [pid, ...kids]) {
    const c = cpuTimes(p);
    // A child gone between the listing and the read reads NaN: left out.
    if (Number.isFinite(c.user) && Number.isFinite(c.sys)) out.set(p, c.user + c.sys);
  }
  return out;
}

/**
 * CPU spent between two readings: per pid, so a child that exits during the round (the old
 * workers of a reload drain and exit) does not subtract its whole lifetime's CPU from the total.
 */
function cpuBetween(before: Map<number, number>, after: Map<number, number>): number {
  let sum = 0;
  for (const [p, c] of after) sum += c - (before.get(p) ?? 0);
  return sum;
}

interface UdpResult {
  perS: number;
  p50Ms: number;
  p99Ms: number;
  lost: number;
  cpuShare: number;
}

/** Proxy CPU per answered datagram (request and reply both crossed the proxy), in µs. */
function cpuPerDatagram(r: UdpResult): number {
  return r.perS > 0 ? (r.cpuShare / r.perS) * 1e6 : 0;
}

/** Closed-loop load from `flows` sockets for `durationS`. */
async function load(ip: string, port: number, flows: number, durationS: number, pid: number): Promise<UdpResult> {
  const rtts: number[] = [];
  let lost = 0;
  const deadline = Date.now() + durationS * 1000;
  const cpu0 = treeCpu(pid);
  const started = process.hrtime.bigint();
  const one = (s: Socket) => new Promise<void>((resolve) => {
    const loop = () => {
      if (Date.now() >= deadline) return resolve();
      const t0 = process.hrtime.bigint();
      const timer = setTimeout(() => {
        s.removeListener('message', onReply);
        lost++;
        loop();
      }, 1000);
      const onReply = () => {
        clearTimeout(timer);
        rtts.push(Number(process.hrtime.bigint() - t0) / 1e6);
        loop();
      };
      s.once('message', onReply);
      s.send(PAYLOAD, port, ip);
    };
    loop();
  });
  const sockets = Array.from({ length: flows }, () => createSocket('udp4'));
  await Promise.all(sockets.map((s) => new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()))));
  await Promise.all(sockets.map(one));
  const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
  const cpu1 = treeCpu(pid);
  for (const s of sockets) s.close();
  return {
    perS: rtts.length / elapsedS, p50Ms: percentile(rtts, 50), p99Ms: percentile(rtts, 99), lost,
    cpuShare: cpuBetween(cpu0, cpu1) / elapsedS,
  };
}

/**
 * Sets up both sides, runs `rounds` ABBA rounds and prints the comparison. `ourPid` is the data
 * plane process's pid (for its CPU time).
 */
export async function runUdpScenario(o: { dir: string; api: Api; nginxBin: string; ourPid: number; waitApplied: () => Promise<unknown>; durationS: number; rounds: number; flows: number; workers: number }): Promise<string[]> {
  startEchoBackends(o.dir);
  const nginx = startNginxUdp(o.dir, o.nginxBin, undefined, o.workers);
  const nb = await o.api('POST', '/nodebalancers', {
    region: 'us-east', label: 'bench-udp',
    configs: [{
      port: UDP_PORT, protocol: 'udp', algorithm: 'roundrobin', stickiness: 'session', check: 'none',
      nodes: UDP_BACKENDS.map((ip, i) => ({ label: `udp-echo-${i + 1}`, address: `${ip}:${UDP_BACKEND_PORT}` })),
    }],
  });
  await o.waitApplied();
  const addr = { ours: nb.ipv4 as string, nginx: NGINX_UDP_IP };
  const pid = { ours: o.ourPid, nginx: nginx.proc.pid! };
  for (const ip of [addr.ours, addr.nginx]) await waitFor(`${ip}:${UDP_PORT} to answer`, () => answers(ip, UDP_PORT), 30_000, 100);
  process.stdout.write(`udp: ${o.flows} flows, closed loop, 64-byte datagrams; ours ${addr.ours}, nginx stream ${addr.nginx} (pid ${pid.nginx}), ${o.workers} worker(s) each${o.workers > 1 ? ', nginx with reuseport' : ''}\n`);
  const samples: Record<'ours' | 'nginx', UdpResult[]> = { ours: [], nginx: [] };
  for (const t of ['ours', 'nginx'] as const) await load(addr[t], UDP_PORT, o.flows, 1, pid[t]); // warm-up
  for (let round = 0; round < o.rounds; round++) {
    const order = round % 2 === 0 ? (['ours', 'nginx'] as const) : (['nginx', 'ours'] as const);
    for (const t of order) {
      const r = await load(addr[t], UDP_PORT, o.flows, o.durationS, pid[t]);
      samples[t].push(r);
      process.stdout.write(`  round ${round + 1} ${t.padEnd(7)} ${fmt(r.perS)} datagrams/s  p50 ${fmt(r.p50Ms, 2)} ms  p99 ${fmt(r.p99Ms, 2)} ms  lost ${r.lost}  proxy cpu ${fmt(r.cpuShare * 100)}% (${fmt(cpuPerDatagram(r), 1)} µs per datagram)\n`);
    }
  }
  const agg = (xs: UdpResult[]) => ({ v: median(xs.map((x) => x.perS)), p50: median(xs.map((x) => x.p50Ms)), p99: median(xs.map((x) => x.p99Ms)), cpu: median(xs.map(cpuPerDatagram)) });
  const ours = agg(samples.ours);
  const ng = agg(samples.nginx);
  const ratio = ours.v / ng.v;
  process.stdout.write(`\n${table([
    ['scenario', 'unit', 'ours', 'nginx', 'ratio', 'target', 'ours p50/p99 ms', 'nginx p50/p99 ms', 'cpu µs/datagram ours', 'nginx'],
    ['udp', 'datagrams/s', fmt(ours.v), fmt(ng.v), fmt(ratio, 2), `>= ${TARGET}`, `${fmt(ours.p50, 2)}/${fmt(ours.p99, 2)}`, `${fmt(ng.p50, 2)}/${fmt(ng.p99, 2)}`, fmt(ours.cpu, 1), fmt(ng.cpu, 1)],
  ])}\n\n`);
  return ratio >= TARGET ? [] : [`udp: ${fmt(ratio, 2)} of nginx's datagrams/s, target ${TARGET}`];
}
