import { execFile } from 'node:child_process';
import { Agent, createServer, request, type Server } from 'node:http';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterEach, describe, expect, it } from 'vitest';
import { startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';
import { startDataplaneProcess, type DataplaneProcess } from '../../security/dataplane-process.js';
import { greeting, readLine, tcpConnect } from './clients.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';
import { workerPids } from './workers-fixture.js';

/**
 * `fulcrum dataplane reload` under a client loop (docs/dataplane.md, "Reload"): new workers
 * start on the same listeners and the old ones drain, while clients keep opening connections
 * and sending keep-alive requests over HTTP and TCP. Nothing may be refused or fail. Addresses:
 * 127.61.0.0/16.
 */

const run = promisify(execFile);

/** GET through the NodeBalancer; resolves with status and body, rejects on any transport failure. */
function get(host: string, port: number, path: string, agent: Agent | false): Promise<{ status: number; body: string; close: boolean }> {
  return new Promise((resolve, reject) => {
    const req = request({ host, port, path, agent, localAddress: '127.61.7.1' }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body, close: /\bclose\b/.test(res.headers.connection ?? '') }));
      res.on('error', reject);
    });
    req.setTimeout(15_000, () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end();
  });
}

describe('reload under a client loop', () => {
  let dp: DataplaneProcess | undefined;
  let web: Server | undefined;
  let tcp: TcpBackend | undefined;
  afterEach(async () => {
    await dp?.stop();
    await new Promise((r) => (web ? web.close(r) : r(undefined)));
    await tcp?.close();
    dp = web = tcp = undefined;
  });

  // Both ways of sharing the listeners (docs/dataplane.md, "Workers"): `kernel` is the default.
  it.each(['rr', 'kernel'])('drops nothing (--distribution %s): HTTP new and keep-alive, TCP new and open sessions, in-flight requests', async (distribution) => {
    web = createServer((req, res) => {
      const send = () => res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok ${req.url}`);
      if (req.url === '/slow') setTimeout(send, 1500);
      else send();
    });
    web.keepAliveTimeout = 60_000;
    await new Promise<void>((r) => web!.listen(0, '127.61.6.1', r));
    const webPort = (web.address() as { port: number }).port;
    tcp = await startTcpBackend('r', { ip: '127.61.6.2' });
    const nb = '127.61.6.10';
    dp = await startDataplaneProcess(snapshot(1, [nodebalancer(nb, [
      config(7621, [node(`127.61.6.1:${webPort}`)], { protocol: 'http' }),
      config(7622, [node(tcp.address)]),
    ], { clientConnThrottle: 0 })]), { flags: ['--workers', '2', '--distribution', distribution, '--drain-time', '4', '--max-conns-per-client', '0', '--max-conns-per-client-total', '0'] });
    await waitFor(() => workerPids(dp!.pid).length === 2, 30_000, 'two workers');
    await waitFor(() => get(nb, 7621, '/', false).then((r) => r.status === 200, () => false), 30_000, 'http up');
    const before = workerPids(dp.pid);

    const stats = { httpNew: 0, httpKeep: 0, tcpNew: 0, toldToClose: 0, failures: [] as string[] };
    let stop = false;
    const keep = new Agent({ keepAlive: true, maxSockets: 4 });
    const loops: Promise<void>[] = [];
    const loop = (fn: () => Promise<void>) => loops.push((async () => {
      while (!stop) {
        try {
          await fn();
        } catch (err) {
          stats.failures.push((err as Error).message);
        }
      }
    })());
    for (let i = 0; i < 2; i++) {
      loop(async () => {
        const r = await get(nb, 7621, '/new', false);
        if (r.status !== 200 || r.body !== 'ok /new') throw new Error(`new: ${r.status} ${r.body}`);
        stats.httpNew++;
      });
    }
    for (let i = 0; i < 4; i++) {
      loop(async () => {
        const r = await get(nb, 7621, '/keep', keep);
        if (r.status !== 200 || r.body !== 'ok /keep') throw new Error(`keep: ${r.status} ${r.body}`);
        stats.httpKeep++;
        if (r.close) stats.toldToClose++;
      });
    }
    for (let i = 0; i < 2; i++) {
      loop(async () => {
        const g = await greeting(nb, 7622, '127.61.7.2');
        if (g !== 'r') throw new Error(`tcp: ${JSON.stringify(g)}`);
        stats.tcpNew++;
      });
    }
    // A TCP session open across the reload keeps working within the drain time.
    const session = await tcpConnect(nb, 7622, '127.61.7.3');
    session.on('error', () => undefined);
    expect(await readLine(session)).toBe('r');
    await waitFor(() => stats.httpNew > 5 && stats.httpKeep > 20 && stats.tcpNew > 5, 30_000, 'the loop runs');
    // A request in flight when the reload starts completes.
    const slow = get(nb, 7621, '/slow', false);
    await new Promise((r) => setTimeout(r, 200));

    await run(process.execPath, [join(process.cwd(), 'bin', 'fulcrum.js'), 'dataplane', 'reload', '--state', dp.stateDir], { env: { ...process.env, FULCRUM_FROM_SOURCE: '1' } });
    await waitFor(() => {
      const now = workerPids(dp!.pid);
      return now.length >= 2 && now.filter((p) => !before.includes(p)).length === 2;
    }, 30_000, 'two new workers');
    expect((await slow).body).toBe('ok /slow');
    const echoed = new Promise<string>((resolve) => session.once('data', (d: Buffer) => resolve(d.toString())));
    session.write('during the drain');
    expect(await echoed).toBe('during the drain');
    // The old workers exit once drained (the open session is cut at the 4 s drain time).
    await waitFor(() => workerPids(dp!.pid).every((p) => !before.includes(p)), 30_000, 'old workers gone');
    const counted = { ...stats, failures: stats.failures.length };
    await waitFor(() => stats.httpKeep > counted.httpKeep + 20 && stats.tcpNew > counted.tcpNew + 5, 30_000, 'the loop runs on the new workers');
    stop = true;
    await Promise.all(loops);
    keep.destroy();
    session.destroy();
    expect(stats.failures).toEqual([]);
    // Keep-alive clients were told to reconnect by the draining workers.
    expect(stats.toldToClose).toBeGreaterThan(0);
    // And the data plane refused no connection, for any reason (summed over the workers).
    const refused = (await dp.metrics()).split('\n').filter((l) => l.startsWith('fulcrum_dataplane_connections_refused_total{'));
    expect(refused.length).toBeGreaterThan(0);
    expect(refused.map((l) => Number(l.slice(l.lastIndexOf(' ') + 1))).reduce((a, b) => a + b, 0)).toBe(0);
    console.log(`reload under the loop: ${JSON.stringify(counted)} before the old workers left, ${stats.httpNew + stats.httpKeep} http, ${stats.tcpNew} tcp in all`);
  });
});
