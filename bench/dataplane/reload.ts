/**
 * The reload figure of `bench:dataplane --workers N`: wrk runs against our data plane while a
 * third of the way in it gets SIGHUP (`fulcrum dataplane reload`): new workers start on the same
 * listeners and the old ones drain. Printed: requests and every kind of wrk error, for keep-alive
 * and for a new connection per request. The reload drops nothing when all errors are 0.
 */
import { PORTS } from './servers.js';
import { errorCount, runWrk } from './wrk.js';

export interface ReloadRun {
  wrk: string;
  script: string;
  ip: string;
  /** The data plane's primary. */
  pid: number;
  durationS: number;
  connections: number;
  threads: number;
}

export async function reloadUnderLoad(o: ReloadRun): Promise<void> {
  process.stdout.write(`\nreload under wrk (SIGHUP at ${Math.round(o.durationS / 3)} s of ${o.durationS} s):\n`);
  for (const [name, headers] of [['http-keepalive', []], ['http-close', ['Connection: close']]] as const) {
    const running = runWrk(o.wrk, o.script, { url: `http://${o.ip}:${PORTS.http}/`, connections: o.connections, durationS: o.durationS, headers: [...headers], threads: o.threads });
    const timer = setTimeout(() => process.kill(o.pid, 'SIGHUP'), (o.durationS * 1000) / 3);
    try {
      const r = await running;
      const errs = errorCount(r);
      process.stdout.write(`  ${name.padEnd(15)} ${r.requests} requests (${Math.round(r.reqPerS)} req/s), p99 ${r.p99Ms.toFixed(2)} ms, errors ${JSON.stringify(r.errors)}${errs === 0 ? ': nothing dropped' : ': DROPPED'}\n`);
    } catch (err) {
      process.stdout.write(`  ${name.padEnd(15)} FAILED: ${(err as Error).message.split('\n')[0]}\n`);
    } finally {
      clearTimeout(timer);
    }
  }
}
