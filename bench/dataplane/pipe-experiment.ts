/**
 * `node dist/bench/dataplane/pipe-experiment.js [--rounds N] [--duration S]`: two bare Node TCP
 * pipes side by side, to measure one idea apart from the data plane. Both read the client with
 * 'data' events; backend -> client bytes are read either
 *   data:   with 'data' events (what dataplane/listeners/tcp-session.ts does; every read
 *           allocates a fresh 64 KiB buffer), or
 *   onread: with net.connect's `onread` into one reused buffer, swapped for a fresh one only when
 *           a write could not complete at once (so a queued chunk is never overwritten): the bare
 *           relay's tcp pipe (relay.ts), which bench:dataplane measures as the tcp floor.
 * Prints MB/s for 50 MB downloads and req/s for small keep-alive exchanges, with the pipe's CPU
 * per MB / per request, in alternating rounds against the same nginx.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { connect, createServer, type Socket } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseFlags } from '../../lib/args.js';
import { cpuTimes, ensureTools, startProcess, stopAll, stopChildrenOnSignal } from '../common/processes.js';
import { fmt, median } from '../common/stats.js';
import { BACKENDS, BACKEND_PORT, startNginx, waitForPort } from './servers.js';
import { pipeTcp } from './relay.js';
import { runWrk, wrkScript } from './wrk.js';

/** Runs one pipe in this process (child mode). */
function servePipe(strategy: string, ip: string, port: number, backendIp: string, backendPort: number): void {
  const server = createServer({ allowHalfOpen: true, noDelay: true }, (c: Socket) => {
    if (strategy === 'onread') {
      pipeTcp(c, backendIp, backendPort);
      return;
    }
    const b = connect({ host: backendIp, port: backendPort, allowHalfOpen: true, noDelay: true });
    b.on('data', (d: Buffer) => {
      if (!c.write(d)) b.pause();
    });
    c.on('data', (d: Buffer) => {
      if (!b.write(d)) c.pause();
    });
    b.on('drain', () => c.resume());
    c.on('drain', () => b.resume());
    c.on('end', () => b.end());
    b.on('end', () => c.end());
    c.on('error', () => b.destroy());
    b.on('error', () => c.destroy());
    c.on('close', () => b.destroy());
    b.on('close', () => c.destroy());
  });
  server.listen(port, ip);
}

async function main(): Promise<void> {
  const f = parseFlags(process.argv.slice(2), { rounds: 'number', duration: 'number' });
  const rounds = (f.rounds as number | undefined) ?? 3;
  const durationS = (f.duration as number | undefined) ?? 4;
  const tools = ensureTools({ nginx: 'nginx', wrk: 'wrk' });
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-pipe-exp-'));
  stopChildrenOnSignal();
  try {
    await startNginx(dir, tools.nginx!);
    const strategies = ['data', 'onread'];
    const pipes = strategies.map((s, i) => {
      const ip = `127.0.81.${i + 1}`;
      const p = startProcess(`pipe-${s}`, process.execPath, [fileURLToPath(import.meta.url), '--serve', s, ip, '9000', BACKENDS[0]!, String(BACKEND_PORT)], dir);
      return { s, ip, p };
    });
    for (const x of pipes) await waitForPort(x.ip, 9000);
    const script = wrkScript(dir);
    for (const [what, path, conns] of [['50 MB downloads, 1 connection', '/big', 1], ['small keep-alive exchanges, 50 connections', '/', 50]] as const) {
      const per = new Map<string, { v: number[]; cpu: number[]; user: number[] }>(strategies.map((s) => [s, { v: [], cpu: [], user: [] }]));
      for (let r = 0; r < rounds; r++) {
        for (const x of r % 2 === 0 ? pipes : [...pipes].reverse()) {
          const t0 = cpuTimes(x.p.pid);
          const res = await runWrk(tools.wrk!, script, { url: `http://${x.ip}:9000${path}`, connections: conns, durationS, timeoutS: 20 });
          const t1 = cpuTimes(x.p.pid);
          const units = path === '/big' ? res.bytes / (1024 * 1024) : res.requests;
          const acc = per.get(x.s)!;
          acc.v.push(path === '/big' ? res.mbPerS : res.reqPerS);
          acc.cpu.push(((t1.user + t1.sys - t0.user - t0.sys) * 1e6) / units);
          acc.user.push(((t1.user - t0.user) * 1e6) / units);
        }
      }
      process.stdout.write(`${what} (medians of ${rounds} rounds)\n`);
      for (const [s, acc] of per) {
        process.stdout.write(`  ${s.padEnd(7)} ${fmt(median(acc.v))} ${path === '/big' ? 'MB/s' : 'req/s'}  cpu ${fmt(median(acc.cpu), 1)} µs per ${path === '/big' ? 'MB' : 'request'} (user ${fmt(median(acc.user), 1)})\n`);
      }
    }
  } finally {
    await stopAll();
    rmSync(dir, { recursive: true, force: true });
  }
}

const argv = process.argv.slice(2);
if (argv[0] === '--serve') servePipe(argv[1]!, argv[2]!, Number(argv[3]), argv[4]!, Number(argv[5]));
else {
  main().then(() => process.exit(0), async (err: Error) => {
    await stopAll();
    process.stderr.write(`pipe experiment failed: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}
