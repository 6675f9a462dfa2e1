/**
 * `node dist/bench/dataplane/udp-floor.js [--rounds N] [--duration S] [--flows N] [--dist A=DIR,...]`:
 * how close our udp listener is to what Node's dgram can do at all, and to nginx, in one run.
 * Targets, each its own process on its own 127.0.65.x address, all in front of the same two UDP
 * echo backends, with the closed-loop load of the udp scenario (udp.ts):
 *   ours:  this build's engine serving one udp config (roundrobin, session stickiness, no checks);
 *          `--dist NAME=DIR` adds the engine of another build (an A/B of the same listener code);
 *   bare:  the least a relay on node:dgram's public API does per datagram: one listening socket,
 *          one connected socket per flow, no caps, counters, stickiness or expiry;
 *   nginx: the `stream` UDP proxy with one worker, as in udp.ts.
 * Rounds rotate the order. Printed per target: datagrams/s and the process's CPU per datagram,
 * split into user and system time (docs/performance.md "UDP").
 */
import { createSocket, type Socket } from 'node:dgram';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { parseFlags } from '../../lib/args.js';
import { cpuTimes, ensureTools, startProcess, stopAll, stopChildrenOnSignal, waitFor } from '../common/processes.js';
import { fmt, median } from '../common/stats.js';
import { answers, startEchoBackends, startNginxUdp } from './udp.js';

const BACKENDS = ['127.0.65.1', '127.0.65.2'];
const BACKEND_PORT = 9253;
const PORT = 8253;
const PAYLOAD = Buffer.alloc(64, 0x75);
const literal = (a: string, _f: unknown, cb: (e: Error | null, a: string, f: number) => void) => cb(null, a, 4);

/** Child mode: the bare relay (see the header). */
function serveBare(ip: string): void {
  const listening = createSocket({ type: 'udp4', lookup: literal });
  const flows = new Map<string, Socket>();
  let next = 0;
  listening.on('message', (msg, from) => {
    const key = `${from.address}:${from.port}`;
    let s = flows.get(key);
    if (s === undefined) {
      const node = BACKENDS[next++ % BACKENDS.length]!;
      const sock = createSocket({ type: 'udp4', lookup: literal });
      sock.connect(BACKEND_PORT, node);
      sock.on('message', (reply) => listening.send(reply, from.port, from.address));
      sock.on('error', () => undefined);
      flows.set(key, (s = sock));
    }
    s.send(msg);
  });
  listening.bind(PORT, ip);
}

/** Child mode: the engine of the build in `dist` serving one udp config on ip:PORT. */
async function serveOurs(dist: string, ip: string): Promise<void> {
  const { createProxyEngine } = (await import(pathToFileURL(join(dist, 'dataplane/engine.js')).href)) as typeof import('../../dataplane/engine.js');
  const nodes = BACKENDS.map((b, i) => ({ id: 11 + i, label: `echo-${i + 1}`, address: `${b}:${BACKEND_PORT}`, weight: 100, mode: 'none' as const }));
  const config = {
    id: 2, port: PORT, protocol: 'udp' as const, algorithm: 'roundrobin' as const, stickiness: 'session' as const, check: 'none' as const,
    checkInterval: 5, checkTimeout: 3, checkAttempts: 2, checkPath: '/', checkBody: '', checkPassive: false, proxyProtocol: 'none' as const,
    cipherSuite: 'none' as const, sslCert: '', sslKey: '', udpCheckPort: 80, udpSessionTimeout: 16, nodes,
  };
  await createProxyEngine({}).apply({ version: 1, nonce: '', nodebalancers: [{ id: 1, label: 'floor', ipv4: ip, clientConnThrottle: 0, configs: [config] }] });
}

interface Round {
  perS: number;
  us: number;
  usUser: number;
  usSys: number;
}

/** Closed-loop load from `flows` sockets for `durationS` (as udp.ts), with the target's CPU. */
async function load(ip: string, pid: number, flows: number, durationS: number): Promise<Round> {
  let answered = 0;
  const deadline = Date.now() + durationS * 1000;
  const sockets = Array.from({ length: flows }, () => createSocket('udp4'));
  await Promise.all(sockets.map((s) => new Promise<void>((r) => s.bind(0, '127.0.0.1', () => r()))));
  const c0 = cpuTimes(pid);
  const started = process.hrtime.bigint();
  await Promise.all(sockets.map((s) => new Promise<void>((done) => {
    const loop = () => {
      if (Date.now() >= deadline) return done();
      const timer = setTimeout(() => {
        s.removeListener('message', onReply);
        loop();
      }, 1000);
      const onReply = () => {
        clearTimeout(timer);
        answered++;
        loop();
      };
      s.once('message', onReply);
      s.send(PAYLOAD, PORT, ip);
    };
    loop();
  })));
  const elapsedS = Number(process.hrtime.bigint() - started) / 1e9;
  const c1 = cpuTimes(pid);
  for (const s of sockets) s.close();
  const per = (x: number) => (answered > 0 ? (x * 1e6) / answered : 0);
  return { perS: answered / elapsedS, us: per(c1.user - c0.user + c1.sys - c0.sys), usUser: per(c1.user - c0.user), usSys: per(c1.sys - c0.sys) };
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2), { rounds: 'number', duration: 'number', flows: 'number', dist: 'string' });
  const rounds = (f.rounds as number | undefined) ?? 4;
  const durationS = (f.duration as number | undefined) ?? 4;
  const flows = (f.flows as number | undefined) ?? 50;
  const builds: Array<[string, string]> = [['ours', fileURLToPath(new URL('../..', import.meta.url))]];
  for (const x of ((f.dist as string | undefined) ?? '').split(',').filter(Boolean)) builds.push([x.slice(0, x.indexOf('=')), resolve(x.slice(x.indexOf('=') + 1))]);
  const tools = ensureTools({ nginx: 'nginx' });
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-udp-floor-'));
  stopChildrenOnSignal();
  const self = fileURLToPath(import.meta.url);
  try {
    startEchoBackends(dir, BACKENDS, BACKEND_PORT);
    const targets: Array<{ name: string; ip: string; pid: number }> = [];
    let host = 10;
    for (const [name, dist] of builds) {
      const ip = `127.0.65.${host++}`;
      targets.push({ name, ip, pid: startProcess(name, process.execPath, [self, '--serve', 'ours', ip, dist], dir).pid });
    }
    const bareIp = `127.0.65.${host++}`;
    targets.push({ name: 'bare', ip: bareIp, pid: startProcess('bare', process.execPath, [self, '--serve', 'bare', bareIp], dir).pid });
    const nginxIp = `127.0.65.${host++}`;
    const master = startNginxUdp(dir, tools.nginx!, { ip: nginxIp, port: PORT, backends: BACKENDS, backendPort: BACKEND_PORT }).pid;
    for (const t of targets) await waitFor(`${t.name} to answer`, () => answers(t.ip, PORT, 300), 30_000, 100);
    await waitFor('nginx to answer', () => answers(nginxIp, PORT, 300), 30_000, 100);
    // nginx's worker does the proxying: measure it, not the master.
    const worker = Number(readFileSync(`/proc/${master}/task/${master}/children`, 'utf8').trim().split(/\s+/)[0]);
    targets.push({ name: 'nginx', ip: nginxIp, pid: worker });
    process.stdout.write(`udp floor: ${flows} flows, closed loop, 64-byte datagrams, ${rounds} rounds x ${durationS} s; load average ${loadavg().map((x) => x.toFixed(2)).join(' ')}\n`);
    for (const t of targets) await load(t.ip, t.pid, flows, 1); // warm-up
    const results = new Map<string, Round[]>(targets.map((t) => [t.name, []]));
    for (let r = 0; r < rounds; r++) {
      const k = r % targets.length;
      const order = [...targets.slice(k), ...targets.slice(0, k)];
      for (const t of r % 2 === 0 ? order : order.reverse()) {
        const x = await load(t.ip, t.pid, flows, durationS);
        results.get(t.name)!.push(x);
        process.stdout.write(`  round ${r + 1} ${t.name.padEnd(6)} ${fmt(x.perS).padStart(7)} datagrams/s  cpu ${fmt(x.us, 1)} µs per datagram (user ${fmt(x.usUser, 1)}, sys ${fmt(x.usSys, 1)})\n`);
      }
    }
    const nginxRate = median(results.get('nginx')!.map((x) => x.perS));
    process.stdout.write(`medians (load average now ${loadavg().map((x) => x.toFixed(2)).join(' ')}):\n`);
    for (const [name, xs] of results) {
      const rate = median(xs.map((x) => x.perS));
      process.stdout.write(`  ${name.padEnd(6)} ${fmt(rate).padStart(7)} datagrams/s (${fmt(rate / nginxRate, 2)} of nginx)  cpu ${fmt(median(xs.map((x) => x.us)), 1)} µs per datagram (user ${fmt(median(xs.map((x) => x.usUser)), 1)}, sys ${fmt(median(xs.map((x) => x.usSys)), 1)})\n`);
    }
  } finally {
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

const argv = process.argv.slice(2);
if (argv[0] === '--serve' && argv[1] === 'bare') serveBare(argv[2]!);
else if (argv[0] === '--serve' && argv[1] === 'ours') {
  serveOurs(argv[3]!, argv[2]!).catch((err: Error) => {
    process.stderr.write(`engine failed: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
} else {
  main().then(() => process.exit(0), async (err: Error) => {
    await stopAll();
    process.stderr.write(`udp floor failed: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
