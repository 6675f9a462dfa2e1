import { Agent as HttpAgent, request as httpRequest } from 'node:http';
import { createServer, type Socket } from 'node:net';
import { Agent as HttpsAgent, request as httpsRequest } from 'node:https';
import { describe, expect, it } from 'vitest';
import { loopback } from '../../helpers/backends.js';
import { startNginx, type NginxBackend } from '../../helpers/nginx.js';
import { cleanup, serveOneConfig } from './engine-harness.js';
import { node } from './snapshot.js';
import { get } from './http-client.js';
import { useNbCerts } from './tls-session.js';

/*
 * nginx ends a keep-alive connection on its own: the keepalive_requests-th response carries
 * `Connection: close`, and a connection idle for keepalive_timeout is closed. Neither may cost a
 * client of the NodeBalancer its connection or a request.
 */

const certs = useNbCerts();

interface Load {
  ok: number;
  errors: string[];
  /** Client connections the agent opened: one per worker when none was closed under it. */
  sockets: number;
}

/** Where the load goes: the NodeBalancer's listener, over http or https. */
interface Target {
  tls: boolean;
  ip: string;
  port: number;
}

async function nginxNb(tls: boolean, http: string): Promise<{ nginx: NginxBackend; target: Target }> {
  const nginx = await startNginx(2, http);
  cleanup.push(() => nginx.close());
  const cfg = tls ? { protocol: 'https' as const, sslCert: certs.certA.cert, sslKey: certs.certA.key } : { protocol: 'http' as const };
  const { ip, port } = await serveOneConfig(nginx.addresses.map((a) => node(a)), cfg);
  return { nginx, target: { tls, ip, port } };
}

/**
 * A keep-alive client of `workers` sockets. `one()` sends a GET and counts how it went; nothing is
 * retried on the client side, so a reset reaches the count.
 */
function client(t: Target, workers: number): { one: () => Promise<void>; result: Load } {
  const agent = t.tls
    ? new HttpsAgent({ keepAlive: true, maxSockets: workers, ca: certs.ca.cert, servername: 'a.nb.test' })
    : new HttpAgent({ keepAlive: true, maxSockets: workers });
  cleanup.push(() => agent.destroy());
  const result: Load = { ok: 0, errors: [], sockets: 0 };
  const seen = new WeakSet<object>();
  let i = 0;
  const one = () => new Promise<void>((resolve) => {
    const send = t.tls ? httpsRequest : httpRequest;
    const req = send({ host: t.ip, port: t.port, path: `/r${i++}`, agent }, (r) => {
      let body = '';
      r.setEncoding('latin1');
      r.on('data', (d: string) => { body += d; });
      r.on('end', () => {
        if (r.statusCode === 200 && body === 'nginx\n') result.ok++;
        else result.errors.push(`status ${r.statusCode}: ${body.slice(0, 80)}`);
        resolve();
      });
      r.on('error', (e) => {
        result.errors.push(`response: ${e.message}`);
        resolve();
      });
    });
    req.on('socket', (s) => {
      if (!seen.has(s)) {
        seen.add(s);
        result.sockets++;
      }
    });
    req.on('error', (e) => {
      result.errors.push(`${e.message}${req.reusedSocket ? ' (reused socket)' : ''}`);
      resolve();
    });
    req.end();
  });
  return { one, result };
}

/** `workers` loops sending `total` GETs between them, each loop one request after another. */
async function load(t: Target, total: number, workers: number): Promise<Load> {
  const { one, result } = client(t, workers);
  let sent = 0;
  await Promise.all(Array.from({ length: workers }, async () => {
    while (sent < total) {
      sent++;
      await one();
    }
  }));
  return result;
}

/** Backend connections nginx closed because they reached `limit` requests. */
function recycled(nginx: NginxBackend, limit: number): number {
  return nginx.log().filter((l) => l.n === limit).length;
}

describe('backend keep-alive ends (nginx at its defaults)', () => {
  for (const tls of [false, true]) {
    const proto = tls ? 'https' : 'http';
    it(`${proto}: backend connections recycled by keepalive_requests cost no client its connection or a request`, async () => {
      // The default mechanism (the limit-th response says Connection: close) with a lower limit.
      const { nginx, target } = await nginxNb(tls, 'keepalive_requests 50;');
      // 100 clients: as many connections as one client may hold on a NodeBalancer, as with
      // `wrk -c100` in the issue (a client reconnecting before its old connection is gone is refused).
      const workers = tls ? 50 : 100;
      const total = tls ? 3000 : 5000;
      const r = await load(target, total, workers);
      expect(r.errors.slice(0, 5)).toEqual([]);
      expect(r.ok).toBe(total);
      expect(r.sockets).toBe(workers);
      expect(recycled(nginx, 50)).toBeGreaterThanOrEqual(total / 50 / 4);
    }, 60_000);
  }

  it('http: at the true default keepalive_requests 1000, recycled connections cost nothing', async () => {
    const { nginx, target } = await nginxNb(false, '');
    const r = await load(target, 6000, 4);
    expect(r.errors.slice(0, 5)).toEqual([]);
    expect(r.ok).toBe(6000);
    expect(r.sockets).toBe(4);
    expect(recycled(nginx, 1000)).toBeGreaterThanOrEqual(4);
  }, 60_000);

  it('http: requests that reuse a pooled connection just as nginx closes it for idleness (keepalive_timeout 1s) all succeed', async () => {
    const { nginx, target } = await nginxNb(false, 'keepalive_timeout 1s;');
    const workers = 25;
    const { one, result } = client(target, workers);
    const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));
    const round = () => Promise.all(Array.from({ length: workers }, one));
    await round();
    // After each pause every pooled backend connection has been idle about as long as nginx
    // allows; the pauses step across that moment, and the requests of a round (sent at once,
    // each taking its own pooled connection) reach nginx a few milliseconds apart.
    const pauses = [985, 990, 995, 1000, 1005, 1010, 1015, 1020, 1030];
    for (const pause of pauses) {
      await sleep(pause);
      await round();
    }
    expect(result.errors.slice(0, 5)).toEqual([]);
    expect(result.ok).toBe((pauses.length + 1) * workers);
    // nginx did close idle connections under us: more backend connections than requests at once.
    expect(new Set(nginx.log().map((l) => l.conn)).size).toBeGreaterThan(workers);
  }, 60_000);

  it('a reused connection closed (FIN or reset) with no answer: an idempotent request is replayed once on a new connection, a POST is not (502)', async () => {
    // The race of a backend closing an idle connection as we write, made certain: this backend
    // answers the first request on each connection and closes on the second without a byte.
    const seen: string[] = [];
    const srv = createServer((s: Socket) => {
      let buf = '';
      let n = 0;
      s.on('data', (d: Buffer) => {
        buf += d.toString('latin1');
        for (;;) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const len = Number(/\r\ncontent-length: *(\d+)/i.exec(buf.slice(0, end))?.[1] ?? 0);
          if (buf.length < end + 4 + len) return;
          const line = buf.slice(0, buf.indexOf('\r\n'));
          seen.push(line.slice(0, line.indexOf(' ')));
          buf = buf.slice(end + 4 + len);
          if (++n === 1) s.write('HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nfirst');
          // A FIN (EOF before any response byte), or for /rst a reset (ECONNRESET).
          else return void (line.includes(' /rst ') ? s.resetAndDestroy() : s.destroy());
        }
      });
      s.on('error', () => s.destroy());
    });
    const bip = loopback();
    await new Promise<void>((r) => srv.listen(0, bip, () => r()));
    cleanup.push(() => new Promise<void>((r) => srv.close(() => r())));
    const { ip, port } = await serveOneConfig([node(`${bip}:${(srv.address() as { port: number }).port}`)], { protocol: 'http', checkPassive: false });
    const agent = new HttpAgent({ keepAlive: true, maxSockets: 1 });
    cleanup.push(() => agent.destroy());
    const url = `http://${ip}:${port}/`;
    expect((await get(url, { agent })).status).toBe(200);
    // Pooled connection reused, closed unanswered: replayed on a new connection, which answers.
    const replayed = await get(url, { agent });
    expect([replayed.status, replayed.body.toString()]).toEqual([200, 'first']);
    expect(seen).toEqual(['GET', 'GET', 'GET']);
    // A POST on that (reused) connection is not replayed: the backend may have acted on it.
    expect((await get(url, { agent, method: 'POST', body: 'x=1' })).status).toBe(502);
    expect(seen).toEqual(['GET', 'GET', 'GET', 'POST']);
    // Once the pooled connection has been idle for a second, a POST gets a new connection.
    expect((await get(url, { agent })).status).toBe(200);
    await new Promise((r) => setTimeout(r, 1_100));
    expect((await get(url, { agent, method: 'POST', body: 'x=2' })).status).toBe(200);
    expect(seen).toEqual(['GET', 'GET', 'GET', 'POST', 'GET', 'POST']);
    // A reset instead of a FIN on the reused connection: replayed the same way.
    const afterReset = await get(`${url}rst`, { agent });
    expect([afterReset.status, afterReset.body.toString()]).toEqual([200, 'first']);
    expect(seen).toEqual(['GET', 'GET', 'GET', 'POST', 'GET', 'POST', 'GET', 'GET']);
  }, 30_000);
});
