import { createServer, connect, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import type { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { loopback, startHttpBackend, waitFor, type HttpBackend } from '../../helpers/backends.js';
import { makeCa, makeCert } from '../../helpers/certs.js';
import { echoBackend } from '../../helpers/tcp.js';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { registerDataplaneMetrics } from '../../../dataplane/telemetry/metrics.js';
import { silentLogger } from '../../../lib/logger.js';
import { ManualClock } from '../../../lib/clock.js';
import { HEAD_TIMEOUT_MS } from '../../../dataplane/listeners/http-session.js';
import { createRegistry } from '../../../lib/metrics.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { get } from './http-client.js';
import { garbage, prng } from '../../helpers/random.js';

/**
 * Hostile input over real sockets: the proxy must refuse what is ambiguous (400), survive what
 * is broken on either side, keep serving everyone else, and leave no connection behind.
 * Deterministic: garbage comes from a seeded generator.
 */


/** Sends `data`, then collects everything until the proxy closes (or `ms` passes: then 'TIMEOUT'). */
function exchange(ip: string, port: number, data: string | Buffer, ms = 5000): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host: ip, port });
    const chunks: Buffer[] = [];
    const timer = setTimeout(() => {
      s.destroy();
      resolve('TIMEOUT ' + Buffer.concat(chunks).toString('latin1'));
    }, ms);
    s.on('data', (d: Buffer) => chunks.push(d));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(chunks).toString('latin1'));
    });
    s.write(data);
  });
}

/** A backend that answers each request head with whatever `mode` says, then closes. */
function evilResponses(): Record<string, (s: Socket) => void> {
  const end = (body: string) => (s: Socket) => s.end(body);
  return {
    ok: end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok'),
    badStatus: end('HTTP/1.1 2x0 OK\r\nContent-Length: 2\r\n\r\nok'),
    notHttp: end('SSH-2.0-OpenSSH\r\n\r\n'),
    badLength: end('HTTP/1.1 200 OK\r\nContent-Length: 1x\r\n\r\nok'),
    bareCr: end('HTTP/1.1 200 OK\r\nX-A: a\rContent-Length: 0\r\nContent-Length: 2\r\n\r\nok'),
    badChunk: end('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\nzz\r\n'),
    hugeChunk: end('HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffffff\r\nhello'),
    hugeHead: (s) => {
      s.write('HTTP/1.1 200 OK\r\n');
      const line = `X-Pad: ${'p'.repeat(1000)}\r\n`;
      let n = 0;
      const pump = () => {
        while (n++ < 200) if (!s.write(line)) return void s.once('drain', pump);
        s.end('\r\n');
      };
      pump();
    },
    closeMidBody: (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n' + 'x'.repeat(1000));
      setImmediate(() => s.destroy());
    },
    resetMidBody: (s) => {
      s.write('HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n' + 'x'.repeat(1000));
      setImmediate(() => s.resetAndDestroy());
    },
    interimFlood: (s) => {
      const one = 'HTTP/1.1 100 Continue\r\n\r\n';
      let n = 0;
      const pump = () => {
        while (n++ < 20000) if (!s.write(one)) return void s.once('drain', pump);
        s.end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok');
      };
      pump();
    },
    clAndTe: end('HTTP/1.1 200 OK\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n'),
    unaskedSwitch: end('HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n\r\nraw'),
    trailingJunk: end('HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n'),
  };
}

let engine: ProxyEngine;
let registry: Registry;
let good: HttpBackend;
let ip: string;
let pGood = 0;
let pEvil = 0;
let pTls = 0;
let pTcp = 0;
let mode = 'ok';
let ca: ReturnType<typeof makeCa>;
const stops: Array<() => Promise<unknown>> = [];

beforeAll(async () => {
  good = await startHttpBackend('a');
  stops.push(() => good.close());
  const responses = evilResponses();
  const evilIp = loopback();
  const evil = createServer((s) => {
    s.on('error', () => undefined);
    let head = '';
    s.on('data', (d: Buffer) => {
      head += d.toString('latin1');
      if (head.includes('\r\n\r\n')) {
        head = '';
        responses[mode](s);
      }
    });
  });
  await new Promise<void>((r) => evil.listen(0, evilIp, () => r()));
  stops.push(() => new Promise((r) => evil.close(() => r(undefined))));
  const echoIp = loopback();
  const echo = await echoBackend(echoIp, 'e');
  stops.push(() => echo.close());
  ip = loopback();
  [pGood, pEvil, pTls, pTcp] = [await freePort(ip), await freePort(ip), await freePort(ip), await freePort(ip)];
  ca = makeCa();
  const cert = makeCert(ca, 'hostile.nb.test');
  registry = createRegistry('dataplane-hostile');
  // Every attack here comes from one address, hundreds of connections at a time: this suite holds
  // the HTTP protections, so the per-client caps (test/security/conn-caps.test.ts) are lifted.
  engine = createProxyEngine({ logger: silentLogger(), limits: { perClientPerNodeBalancer: 0, perClient: 0 } });
  registerDataplaneMetrics(registry, engine);
  const evilAddr = `${evilIp}:${(evil.address() as { port: number }).port}`;
  await engine.apply(snapshot(1, [nodebalancer(ip, [
    config(pGood, [node(good.address)], { protocol: 'http', checkPassive: false }),
    config(pEvil, [node(evilAddr)], { protocol: 'http', checkPassive: false }),
    config(pTls, [node(good.address)], { protocol: 'https', sslCert: cert.cert, sslKey: cert.key, checkPassive: false }),
    config(pTcp, [node(`${echoIp}:${echo.port}`)], { protocol: 'tcp', checkPassive: false }),
  ])]));
});

afterAll(async () => {
  await engine?.close();
  for (const s of stops.reverse()) await s().catch(() => undefined);
});

async function activeConnections(): Promise<number> {
  const m = registry.getSingleMetric('fulcrum_dataplane_active_connections')!;
  return (await m.get()).values.reduce((a, v) => a + v.value, 0);
}

/** Another client on the same listener is served correctly, and nothing is left open. */
async function othersServedAndNoLeak(): Promise<void> {
  const r = await get(`http://${ip}:${pGood}/ok`);
  expect(r.status).toBe(200);
  expect(r.body.toString()).toBe('a');
  await waitFor(async () => (await activeConnections()) === 0, 10_000, 'active connections back to 0').catch(async (e) => {
    throw new Error(`${(e as Error).message}: ${await activeConnections()} open`);
  });
}

describe('dataplane under hostile clients and backends', () => {
  it('refuses malformed and ambiguous requests with 400 and forwards none of them', async () => {
    const bad: Record<string, string> = {
      noVersion: 'GARBAGE\r\n\r\n',
      http2: 'GET / HTTP/2.0\r\nHost: x\r\n\r\n',
      extraToken: 'GET / HTTP/1.1 x\r\nHost: x\r\n\r\n',
      doubleSpace: 'GET  / HTTP/1.1\r\nHost: x\r\n\r\n',
      ctlInTarget: 'GET /\x01 HTTP/1.1\r\nHost: x\r\n\r\n',
      leadingSpaceMethod: ' GET / HTTP/1.1\r\nHost: x\r\n\r\n',
      clAndTe: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      teAndCl: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n',
      duplicateCl: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!',
      listCl: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5, 5\r\n\r\nhello',
      signedCl: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: +5\r\n\r\nhello',
      hexCl: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 0x5\r\n\r\nhello',
      hugeCl: 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999999999999\r\n\r\n',
      teGzip: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n',
      teChunkedThenIdentity: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n',
      teEmpty: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n\r\n',
      teSecondHeader: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: x\r\n\r\n0\r\n\r\n',
      obsFold: 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n',
      foldedTe: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding:\r\n chunked\r\n\r\n0\r\n\r\n',
      spaceBeforeColon: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n0\r\n\r\n',
      bareLf: 'GET / HTTP/1.1\r\nHost: x\nX-A: b\r\n\r\n',
      bareCrInValue: 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\rTransfer-Encoding: chunked\r\n\r\n',
      nulInValue: 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n',
      delInValue: 'GET / HTTP/1.1\r\nHost: x\r\nX-A: a\x7fb\r\n\r\n',
      noColon: 'GET / HTTP/1.1\r\nHost: x\r\nJustAName\r\n\r\n',
      emptyName: 'GET / HTTP/1.1\r\nHost: x\r\n: v\r\n\r\n',
      chunkSizeOverflow: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n10000000000000001\r\nx\r\n0\r\n\r\n',
      chunkSizeBeyondDoubles: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n20000000000001\r\nx\r\n0\r\n\r\n',
      chunkSizeNotHex: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\nhello\r\n0\r\n\r\n',
      chunkSizeNegative: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\nhello\r\n0\r\n\r\n',
      chunkExtBareLf: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=b\nhello\r\n0\r\n\r\n',
      chunkExtCtl: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5;a=\x00\r\nhello\r\n0\r\n\r\n',
      chunkDataTooLong: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nhello\r\n0\r\n\r\n',
      chunkBareLfAfterData: 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\n0\r\n\r\n',
    };
    const before = good.hits;
    for (const [name, req] of Object.entries(bad)) {
      const out = await exchange(ip, pGood, req);
      // The proxy's own 400 (a backend's 400 would mean the request was forwarded).
      expect(out, name).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n[\s\S]*Your browser sent an invalid request/);
    }
    expect(good.hits).toBe(before);
    await othersServedAndNoLeak();
  });

  it('answers the valid request and refuses the pipelined garbage behind it', async () => {
    const before = good.hits;
    const out = await exchange(ip, pGood, 'GET /1 HTTP/1.1\r\nHost: x\r\n\r\nGET /2 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nxx');
    expect(out).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\n1\r\na\r\n0\r\n\r\nHTTP\/1\.1 400 /);
    expect(good.hits).toBe(before + 1);
    const rand = prng(7);
    for (let i = 0; i < 20; i++) {
      const junk = garbage(rand, 1 + Math.floor(rand() * 2000));
      const r = await exchange(ip, pGood, Buffer.concat([Buffer.from('GET /ok HTTP/1.1\r\nHost: x\r\n\r\n'), junk, Buffer.from('\r\n\r\n')]));
      expect(r).toMatch(/^HTTP\/1\.1 200 OK/);
      expect(r).toMatch(/HTTP\/1\.1 400 /);
    }
    await othersServedAndNoLeak();
  });

  it('caps a huge or endless head at 431 without buffering it all', async () => {
    const out = await exchange(ip, pGood, `GET / HTTP/1.1\r\nHost: x\r\nX-A: ${'a'.repeat(20_000)}\r\n\r\n`);
    expect(out).toMatch(/^HTTP\/1\.1 431/);
    // An endless head with no blank line: cut at the limit even though the client keeps sending.
    const endless = await new Promise<string>((resolve) => {
      const s = connect({ host: ip, port: pGood });
      let got = '';
      let sent = 0;
      s.on('data', (d: Buffer) => (got += d.toString('latin1')));
      s.on('error', () => undefined);
      s.on('close', () => resolve(`${got}|sent=${sent}`));
      s.write('GET / HTTP/1.1\r\n');
      const line = `X-${'b'.repeat(1000)}: y\r\n`;
      const pump = () => {
        while (!s.destroyed && sent < 4_000_000) {
          sent += line.length;
          if (!s.write(line)) return void s.once('drain', pump);
        }
      };
      pump();
    });
    expect(endless).toMatch(/^HTTP\/1\.1 431/);
    await othersServedAndNoLeak();
  });

  it('keeps serving others while hundreds of slowloris clients trickle heads', async () => {
    const slow: Socket[] = [];
    for (let i = 0; i < 200; i++) {
      const s = connect({ host: ip, port: pGood });
      s.on('error', () => undefined);
      slow.push(s);
    }
    const head = 'GET /slow HTTP/1.1\r\nHost: x\r\nX-Trickle: ';
    for (let k = 0; k < head.length; k++) {
      for (const s of slow) s.write(head[k]);
      if (k % 10 === 0) {
        const r = await get(`http://${ip}:${pGood}/ok`);
        expect(r.body.toString()).toBe('a');
      }
    }
    await waitFor(async () => (await activeConnections()) >= 200, 5000, 'slow clients accepted');
    for (const s of slow) s.destroy();
    await othersServedAndNoLeak();
  });

  it('cuts a slowloris head that is still incomplete after the head timeout with 408', async () => {
    const clock = new ManualClock();
    const reg = createRegistry('dataplane-hostile-clock');
    const e2 = createProxyEngine({ logger: silentLogger(), clock });
    registerDataplaneMetrics(reg, e2);
    stops.push(() => e2.close());
    const ip2 = loopback();
    const p2 = await freePort(ip2);
    await e2.apply(snapshot(1, [nodebalancer(ip2, [config(p2, [node(good.address)], { protocol: 'http', checkPassive: false })])]));
    const s = connect({ host: ip2, port: p2 });
    let got = '';
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('error', () => undefined);
    await new Promise((r) => s.once('connect', r));
    s.write('GET / HTTP/1.1\r\n');
    // Each poll: time jumps past the limit and one more byte trickles in. Whichever read first
    // saw the partial head started its timer, the next one after a jump must be refused.
    const before = good.hits;
    await waitFor(() => {
      clock.advance(HEAD_TIMEOUT_MS + 1);
      if (!s.destroyed) s.write('X');
      return got.length > 0;
    }, 10_000, '408');
    expect(got).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n/);
    expect(good.hits).toBe(before);
    // A head that arrives whole is never timed, however far the clock moves.
    const c = connect({ host: ip2, port: p2 });
    let ok = '';
    c.on('data', (d: Buffer) => (ok += d.toString('latin1')));
    await new Promise((r) => c.once('connect', r));
    clock.advance(10 * HEAD_TIMEOUT_MS);
    c.write('GET /ok HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    await waitFor(() => ok.endsWith('0\r\n\r\n'), 5000, '200');
    expect(ok).toMatch(/^HTTP\/1\.1 200 OK/);
    c.destroy();
    s.destroy();
  });

  it('survives clients that reset mid-body and mid-response, in both directions', async () => {
    const rand = prng(11);
    for (let i = 0; i < 30; i++) {
      await new Promise<void>((resolve) => {
        const s = connect({ host: ip, port: pGood }, () => {
          const chunked = i % 2 === 1;
          s.write(`POST /upload HTTP/1.1\r\nHost: x\r\n${chunked ? 'Transfer-Encoding: chunked' : 'Content-Length: 1000000'}\r\n\r\n`);
          s.write(chunked ? `4000\r\n${'z'.repeat(0x4000)}\r\n` : garbage(rand, 50_000));
          setTimeout(() => (i % 3 === 0 ? s.destroy() : s.resetAndDestroy()), Math.floor(rand() * 20));
        });
        s.on('error', () => undefined);
        s.on('close', () => resolve());
      });
      await waitFor(async () => (await activeConnections()) === 0, 3000, `upload ${i} closed`);
    }
    // A client that asks for a big download and resets after the first bytes.
    for (let i = 0; i < 10; i++) {
      await new Promise<void>((resolve) => {
        const s = connect({ host: ip, port: pGood }, () => s.write('GET /download?bytes=20000000 HTTP/1.1\r\nHost: x\r\n\r\n'));
        s.once('data', () => s.resetAndDestroy());
        s.on('error', () => undefined);
        s.on('close', () => resolve());
      });
    }
    await othersServedAndNoLeak();
  });

  it('turns malformed backend responses into 502 or a cut connection, never a crash', async () => {
    const expectations: Record<string, RegExp> = {
      badStatus: /^HTTP\/1\.1 502/,
      notHttp: /^HTTP\/1\.1 502/,
      badLength: /^HTTP\/1\.1 502/,
      bareCr: /^HTTP\/1\.1 502/,
      hugeHead: /^HTTP\/1\.1 502/,
      unaskedSwitch: /^HTTP\/1\.1 502/,
      // The first 32 interim heads are passed on, then the flood is cut with a 502.
      interimFlood: /^(HTTP\/1\.1 100 Continue\r\n\r\n){32}HTTP\/1\.1 502/,
      // Content-Length beside Transfer-Encoding: framed as chunked, and the Content-Length is not passed on.
      clAndTe: /^HTTP\/1\.1 200 OK\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n$/,
      // Bad chunking seen before any of the response went out: a clean 502.
      badChunk: /^HTTP\/1\.1 502/,
      hugeChunk: /^HTTP\/1\.1 502/,
      // Cut after a partial body: the client sees a truncated message, then the close.
      closeMidBody: /^HTTP\/1\.1 200 OK\r\nContent-Length: 100000\r\n/,
      resetMidBody: /^HTTP\/1\.1 200 OK\r\nContent-Length: 100000\r\n/,
      // The response ends where its length says; the smuggled second one never reaches the client.
      // (The client asked to close and the backend was not told so: we add the Connection line.)
      trailingJunk: /^HTTP\/1\.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok$/,
      ok: /^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\nok$/,
    };
    for (const [m, re] of Object.entries(expectations)) {
      mode = m;
      const out = await exchange(ip, pEvil, 'GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n', 10_000);
      expect(out.slice(0, 1200), m).toMatch(re);
      if (m === 'closeMidBody' || m === 'resetMidBody') expect(out.length, m).toBeLessThan(100_000);
      const r = await get(`http://${ip}:${pGood}/ok`);
      expect(r.body.toString(), `other client after ${m}`).toBe('a');
    }
    mode = 'ok';
    await othersServedAndNoLeak();
  });

  it('drops TLS garbage on the https port and keeps completing real handshakes', async () => {
    const rand = prng(23);
    const hellos: Array<string | Buffer> = [
      'GET / HTTP/1.1\r\nHost: x\r\n\r\n',
      Buffer.from([0x16, 0x03, 0x01, 0xff, 0xff]), // record header claiming 64 KiB, then nothing
      Buffer.concat([Buffer.from([0x16, 0x03, 0x01, 0x00, 0x40]), garbage(rand, 64)]),
      Buffer.from([0x80, 0x2e, 0x01, 0x00, 0x02]), // SSLv2-style hello
    ];
    for (let i = 0; i < 10; i++) hellos.push(garbage(rand, 1 + Math.floor(rand() * 5000)));
    for (const h of hellos) {
      const out = await exchange(ip, pTls, h, 3000);
      expect(out.startsWith('HTTP/1.1 200')).toBe(false);
      if (out.startsWith('TIMEOUT')) expect(h.length).toBe(5); // only the waiting-for-more record header may stall
    }
    // Handshake completed, then garbage instead of HTTP: 400 over TLS.
    const tlsAnswer = await new Promise<string>((resolve) => {
      const s = tlsConnect({ host: ip, port: pTls, ca: ca.cert, servername: 'hostile.nb.test' }, () => s.write('\x00\x01\x02 junk\r\n\r\n'));
      let got = '';
      s.on('data', (d: Buffer) => (got += d.toString('latin1')));
      s.on('error', () => undefined);
      s.on('close', () => resolve(got));
    });
    expect(tlsAnswer).toMatch(/^HTTP\/1\.1 400/);
    // Many handshakes dropped half-way.
    await Promise.all(Array.from({ length: 200 }, (_, i) => new Promise<void>((resolve) => {
      const s = tlsConnect({ host: ip, port: pTls, ca: ca.cert, servername: 'hostile.nb.test' });
      s.on('error', () => undefined);
      s.on('close', () => resolve());
      if (i % 2 === 0) setImmediate(() => s.destroy());
      else s.once('secureConnect', () => s.destroy());
    })));
    const ok = await new Promise<string>((resolve, reject) => {
      const s = tlsConnect({ host: ip, port: pTls, ca: ca.cert, servername: 'hostile.nb.test' }, () => s.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n'));
      let got = '';
      s.on('data', (d: Buffer) => (got += d.toString('latin1')));
      s.on('error', reject);
      s.on('close', () => resolve(got));
    });
    expect(ok).toMatch(/^HTTP\/1\.1 200 OK[\s\S]*\r\n\r\n1\r\na\r\n0\r\n\r\n$/);
    await othersServedAndNoLeak();
  });

  it('survives thousands of connections opened and dropped on the http and tcp ports', async () => {
    const rand = prng(5);
    for (let batch = 0; batch < 10; batch++) {
      const pending = new Set<string>();
      const all = Promise.all(Array.from({ length: 200 }, (_, i) => new Promise<void>((resolve) => {
        const port = i % 2 === 0 ? pGood : pTcp;
        const s = connect({ host: ip, port });
        s.on('error', () => undefined);
        s.resume();
        const how = Math.floor(rand() * 4);
        const tag = `${batch}/${i} port=${port === pGood ? 'http' : 'tcp'} how=${how}`;
        pending.add(tag);
        s.on('close', () => {
          pending.delete(tag);
          resolve();
        });
        if (how === 0) s.destroy();
        else s.once('connect', () => {
          if (how === 1) s.resetAndDestroy();
          else if (how === 2) s.end(garbage(rand, 100));
          else {
            s.write(port === pGood ? 'GET /ok HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nabc' : garbage(rand, 3000));
            setImmediate(() => s.resetAndDestroy());
          }
        });
      })));
      await Promise.race([all, new Promise((r) => setTimeout(r, 8000))]);
      expect([...pending]).toEqual([]);
    }
    const echoed = await new Promise<string>((resolve) => {
      const s = connect({ host: ip, port: pTcp }, () => s.write('ping'));
      s.on('data', (d: Buffer) => {
        resolve(d.toString());
        s.destroy();
      });
    });
    expect(echoed).toBe('e:ping');
    await othersServedAndNoLeak();
  });
});
