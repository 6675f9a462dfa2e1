import { Agent, request } from 'node:http';
import { connect, createServer, type Server, type Socket } from 'node:net';
import { connect as tlsConnect } from 'node:tls';
import { makeCa, makeCert } from '../../helpers/certs.js';
import { describe, expect, it } from 'vitest';
import { loopback, patternBytes, sha256, startHttpBackend } from '../../helpers/backends.js';
import { cleanup, newEngine } from '../dataplane/engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from '../dataplane/snapshot.js';

// Backend connections read into one reused buffer (dataplane/listeners/backend-conn.ts); bytes
// still queued for a slow client must never be overwritten by the next read. A slow reader makes
// writes queue, and a checksum catches any overwritten byte.

/** GET through `agent`, consuming the body slowly: a pause every few chunks. */
function slowGet(url: string, agent: Agent): Promise<{ status: number; body: Buffer }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent }, (res) => {
      const chunks: Buffer[] = [];
      let n = 0;
      res.on('data', (d: Buffer) => {
        chunks.push(d);
        if (++n % 8 === 0) {
          res.pause();
          setTimeout(() => res.resume(), 3);
        }
      });
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: Buffer.concat(chunks) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end();
  });
}

/**
 * An HTTP/1.1 backend that answers every request with `size` pattern bytes written in small
 * pieces with a pause between them, so that the proxy's reads are small (below the client
 * socket's 16 KiB write threshold) and its writes to a slow client queue without backpressure.
 */
async function trickleBackend(ip: string, size: number, seed: number): Promise<{ server: Server; address: string }> {
  const body = patternBytes(size, seed);
  const server = createServer((s) => {
    s.on('error', () => s.destroy());
    let pending = '';
    s.on('data', (d: Buffer) => {
      pending += d.toString('latin1');
      while (pending.includes('\r\n\r\n')) {
        pending = pending.slice(pending.indexOf('\r\n\r\n') + 4);
        s.write(`HTTP/1.1 200 OK\r\nContent-Length: ${size}\r\n\r\n`);
        let off = 0;
        const step = () => {
          if (s.destroyed) return;
          const end = Math.min(size, off + 3000);
          s.write(body.subarray(off, end));
          off = end;
          if (off < size) setImmediate(step);
        };
        step();
      }
    });
  });
  await new Promise<void>((r) => server.listen(0, ip, () => r()));
  return { server, address: `${ip}:${(server.address() as { port: number }).port}` };
}

/**
 * One keep-alive client connection that sends `count` GETs one after another and, for each,
 * stops reading for `stallMs` right after sending it (so the proxy's writes back up), then reads
 * the whole response. Returns the bodies.
 */
function stalledGets(ip: string, port: number, count: number, stallMs: number, tls = false): Promise<Buffer[]> {
  return new Promise((resolve, reject) => {
    const s: Socket = tls ? tlsConnect({ host: ip, port, rejectUnauthorized: false }) : connect({ host: ip, port });
    const bodies: Buffer[] = [];
    let buf = Buffer.alloc(0);
    let want = -1;
    const next = () => {
      if (bodies.length === count) {
        s.destroy();
        resolve(bodies);
        return;
      }
      s.write(`GET /${bodies.length} HTTP/1.1\r\nHost: x\r\n\r\n`);
      s.pause();
      setTimeout(() => s.resume(), stallMs);
    };
    s.on('data', (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      for (;;) {
        if (want < 0) {
          const end = buf.indexOf('\r\n\r\n');
          if (end < 0) return;
          const m = /content-length: *(\d+)/i.exec(buf.subarray(0, end).toString('latin1'));
          if (!m) return reject(new Error(`no Content-Length in ${buf.subarray(0, end).toString('latin1')}`));
          want = Number(m[1]);
          buf = buf.subarray(end + 4);
        }
        if (buf.length < want) return;
        bodies.push(Buffer.from(buf.subarray(0, want)));
        buf = buf.subarray(want);
        want = -1;
        next();
      }
    });
    s.on('error', reject);
    s.once(tls ? 'secureConnect' : 'connect', next);
  });
}

describe('http backend reads into a reused buffer', () => {
  it('small reads queued behind a stalled client are never overwritten', async () => {
    const size = 16 * 1024 * 1024;
    const seed = 11;
    const b = await trickleBackend(loopback(), size, seed);
    cleanup.push(() => new Promise<void>((r) => b.server.close(() => r())));
    const ip = loopback();
    const port = await freePort(ip);
    const { engine } = newEngine();
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(b.address)], { protocol: 'http' })])]));
    const bodies = await stalledGets(ip, port, 2, 300);
    const expected = sha256(patternBytes(size, seed));
    for (const body of bodies) {
      expect(body.length).toBe(size);
      expect(sha256(body)).toBe(expected);
    }
  }, 180_000);

  it('the same over https (TLS terminated by the proxy)', async () => {
    const size = 8 * 1024 * 1024;
    const seed = 12;
    const b = await trickleBackend(loopback(), size, seed);
    cleanup.push(() => new Promise<void>((r) => b.server.close(() => r())));
    const ip = loopback();
    const port = await freePort(ip);
    const cert = makeCert(makeCa(), 'bench.test');
    const { engine } = newEngine();
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(b.address)], { protocol: 'https', sslCert: cert.cert, sslKey: cert.key })])]));
    const bodies = await stalledGets(ip, port, 2, 300, true);
    const expected = sha256(patternBytes(size, seed));
    for (const body of bodies) {
      expect(body.length).toBe(size);
      expect(sha256(body)).toBe(expected);
    }
  }, 180_000);

  it('keeps a response head that arrives in pieces intact', async () => {
    // The head is split mid-line; the first piece is kept while the next read lands.
    const server = createServer((sock) => {
      sock.on('error', () => sock.destroy());
      sock.on('data', () => {
        sock.write('HTTP/1.1 200 OK\r\nX-Long-Header: ' + 'a'.repeat(2000) + '\r\nContent-Le');
        setTimeout(() => sock.write('ngth: 5\r\nX-Tail: ' + 'b'.repeat(3000) + '\r\n\r\nhello'), 30);
      });
    });
    const bip = loopback();
    await new Promise<void>((r) => server.listen(0, bip, () => r()));
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    const ip = loopback();
    const port = await freePort(ip);
    const { engine } = newEngine();
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(`${bip}:${(server.address() as { port: number }).port}`)], { protocol: 'http' })])]));
    const agent = new Agent({ keepAlive: true, maxSockets: 1 });
    try {
      for (let i = 0; i < 3; i++) {
        const r = await new Promise<{ status: number; headers: Record<string, unknown>; body: string }>((resolve, reject) => {
          const req = request(`http://${ip}:${port}/`, { agent }, (res) => {
            let body = '';
            res.setEncoding('latin1');
            res.on('data', (d: string) => (body += d));
            res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
          });
          req.on('error', reject);
          req.end();
        });
        expect(r.status).toBe(200);
        expect(r.headers['x-long-header']).toBe('a'.repeat(2000));
        expect(r.headers['x-tail']).toBe('b'.repeat(3000));
        expect(r.body).toBe('hello');
      }
    } finally {
      agent.destroy();
    }
  });

  it('delivers downloads intact to slow keep-alive readers, Content-Length and chunked, several at once', async () => {
    const backend = await startHttpBackend('big');
    cleanup.push(() => backend.close());
    const ip = loopback();
    const port = await freePort(ip);
    const { engine } = newEngine();
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(backend.address)], { protocol: 'http' })])]));

    const size = 6 * 1024 * 1024;
    const one = async (k: number) => {
      // One client connection, two responses in a row: the second reuses the pooled backend connection.
      const agent = new Agent({ keepAlive: true, maxSockets: 1 });
      try {
        for (const chunked of [false, true]) {
          const seed = k * 2 + (chunked ? 1 : 0) + 1;
          const r = await slowGet(`http://${ip}:${port}/download?bytes=${size}&seed=${seed}${chunked ? '&chunked=1' : ''}`, agent);
          expect(r.status).toBe(200);
          expect(r.body.length).toBe(size);
          expect(sha256(r.body)).toBe(sha256(patternBytes(size, seed)));
        }
      } finally {
        agent.destroy();
      }
    };
    await Promise.all([0, 1, 2, 3].map(one));
  }, 60_000);
});
