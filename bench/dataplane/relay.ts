/**
 * The bare Node relay: the floor our data plane's CPU per request is measured against
 * (`bench:dataplane`, docs/performance.md "CPU per request against a bare Node relay"). It does
 * the work our data plane does for the bench's scenarios with the simplest correct Node code and
 * nothing else: no config, no metrics, no health checks, no timeouts, no caps, no retries.
 *
 * - tcp: one backend connection per client connection (round robin), bytes piped both ways with
 *   backpressure and half-close; backend bytes read with `onread` into one reused buffer.
 * - http and https (TLS terminated here, the bench's certificate and our `recommended` TLS 1.2
 *   ciphers): the request head is read minimally (end of head, Content-Length, Transfer-Encoding,
 *   Connection, version), its Connection line dropped and X-Forwarded-For/Proto added; each
 *   request picks a backend round robin and takes an idle keep-alive connection from that
 *   backend's pool (or opens one); the response head is read for its framing (Content-Length,
 *   chunked, none for HEAD/204/304, else until close), its Connection line rewritten when the
 *   client's connection and the backend's part ways, and the connection goes back to the pool.
 *   Request bodies: Content-Length only (a chunked request gets 501 and a close).
 *
 * With `workers` > 1 it runs as node:cluster workers that accept for themselves (SCHED_NONE, as
 * our data plane's default `kernel` distribution), the primary idle; its CPU is the process tree's.
 *
 * `node dist/bench/dataplane/relay.js --serve '<RelaySpec as JSON>'` runs it; startRelay() does
 * that from a bench.
 */
import cluster from 'node:cluster';
import { readFileSync } from 'node:fs';
import { connect, createServer, type AddressInfo, type Server, type Socket } from 'node:net';
import { createServer as createTlsServer } from 'node:tls';
import { fileURLToPath } from 'node:url';
import { startProcess, type Spawned } from '../common/processes.js';

export interface RelaySpec {
  ip: string;
  /** Listening ports; a protocol left out is not served. */
  ports: { http?: number; tcp?: number; https?: number };
  backends: Array<{ host: string; port: number }>;
  /** PEM files for https. */
  certFile?: string;
  keyFile?: string;
  /** TLS 1.2 cipher list (OpenSSL names, colon-separated). */
  ciphers?: string;
  workers: number;
}

/** Starts the relay as a child process (stopped by stopAll); the caller waits for its ports. */
export function startRelay(logDir: string, spec: RelaySpec, name = 'relay'): Spawned {
  return startProcess(name, process.execPath, [fileURLToPath(import.meta.url), '--serve', JSON.stringify(spec)], logDir);
}

const TCP_READ = 64 * 1024;
const HTTP_READ = 32 * 1024;
const MAX_HEAD = 16 * 1024;
const MAX_RESPONSE_HEAD = 64 * 1024;
const CRLF2 = Buffer.from('\r\n\r\n', 'latin1');
const CONNECTION_CLOSE = Buffer.from('Connection: close\r\n', 'latin1');
const R501 = Buffer.from('HTTP/1.1 501 Not Implemented\r\nContent-Length: 0\r\nConnection: close\r\n\r\n', 'latin1');
const R400 = Buffer.from('HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n', 'latin1');
const R502 = Buffer.from('HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n', 'latin1');

interface Backend {
  host: string;
  port: number;
  idle: Upstream[];
}

/** Round robin over the backends. */
function picker(backends: Backend[]): () => Backend {
  let next = 0;
  return () => {
    const b = backends[next]!;
    next = next + 1 === backends.length ? 0 : next + 1;
    return b;
  };
}

// ---- tcp ------------------------------------------------------------------------------------

/** Pipes client connection `c` to a new connection to host:port (pipe-experiment's `onread` pipe too). */
export function pipeTcp(c: Socket, host: string, port: number): void {
  let buf = Buffer.allocUnsafeSlow(TCP_READ);
  let swap = false;
  const b = connect({
    host, port, allowHalfOpen: true, noDelay: true,
    onread: {
      // Called after every read: a chunk still queued on the client must not be overwritten.
      buffer: () => {
        if (swap) {
          buf = Buffer.allocUnsafeSlow(TCP_READ);
          swap = false;
        }
        return buf;
      },
      callback: (n: number, chunk: Uint8Array) => {
        const ok = c.write(n === chunk.length ? chunk : chunk.subarray(0, n));
        if (c.writableLength > 0) swap = true;
        return ok; // false pauses the backend until the client drains
      },
    },
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
}

// ---- http -----------------------------------------------------------------------------------

/** Response framing states. */
const F_LENGTH = 0;
const F_CHUNKED = 1;
const F_EOF = 2;
const F_DONE = 3;
/** Chunked coding scanner states. */
const C_SIZE = 0;
const C_EXT = 1;
const C_DATA = 2;
const C_DATA_END = 3;
const C_TRAILER_START = 4;
const C_TRAILER = 5;
const C_LAST = 6;

/** A keep-alive connection to a backend; its session while a request uses it, else pooled. */
class Upstream {
  readonly socket: Socket;
  owner: HttpRelay | null;
  connected = false;
  private buf = Buffer.allocUnsafeSlow(HTTP_READ);
  private swap = false;

  constructor(readonly backend: Backend, owner: HttpRelay) {
    this.owner = owner;
    this.socket = connect({
      host: backend.host, port: backend.port, noDelay: true,
      onread: { buffer: this.nextBuffer, callback: this.onRead },
    });
    this.socket.on('connect', () => {
      this.connected = true;
      this.owner?.onUpstreamConnect(this);
    });
    this.socket.on('error', () => undefined); // 'close' follows
    this.socket.on('close', () => {
      const i = backend.idle.indexOf(this);
      if (i >= 0) backend.idle.splice(i, 1);
      const o = this.owner;
      this.owner = null;
      o?.onUpstreamClose(this);
    });
    this.socket.on('drain', () => this.owner?.resumeClient());
  }

  private readonly nextBuffer = (): Buffer => {
    if (this.swap) {
      this.buf = Buffer.allocUnsafeSlow(HTTP_READ);
      this.swap = false;
    }
    return this.buf;
  };

  private readonly onRead = (n: number, buf: Buffer): boolean => {
    const o = this.owner;
    if (o === null) {
      this.socket.destroy(); // bytes on an idle connection: not HTTP any more
      return false;
    }
    // Bytes the session still holds after the call (a queued client write, a partial head) must
    // not be overwritten by the next read.
    if (o.onUpstreamData(this, n === buf.length ? buf : buf.subarray(0, n))) this.swap = true;
    return true;
  };

  release(): void {
    this.owner = null;
    if (this.socket.destroyed) return;
    this.backend.idle.push(this);
  }
}

/** One client connection of the http or https relay. */
class HttpRelay {
  /** Client bytes not yet handled (a partial head, the next request). */
  private pending: Buffer | null = null;
  private busy = false;
  private up: Upstream | null = null;
  private out: Buffer | null = null;
  private reqLeft = 0;
  private closeClient = false;
  private clientEnded = false;
  private closed = false;
  // response
  private resHead: Buffer | null = null;
  private gotHead = false;
  private isHead = false;
  private frame = F_DONE;
  private resLeft = 0;
  /** Chunked scanner: the current chunk's size, then its data bytes left; and the scanner's state. */
  private chunkLeft = 0;
  private chunkState = C_SIZE;
  private upstreamCloses = false;
  private readonly xff: Buffer;

  constructor(private readonly client: Socket, private readonly pick: () => Backend, private readonly tls: boolean) {
    this.xff = Buffer.from(`X-Forwarded-For: ${client.remoteAddress ?? ''}\r\nX-Forwarded-Proto: ${tls ? 'https' : 'http'}\r\n\r\n`, 'latin1');
    client.setNoDelay(true);
    client.on('data', this.onData);
    client.on('end', () => {
      this.clientEnded = true;
      if (!this.busy) client.end();
      else this.closeClient = true;
    });
    client.on('error', () => client.destroy());
    client.on('close', () => {
      this.closed = true;
      const up = this.up;
      this.up = null;
      if (up !== null) {
        up.owner = null;
        up.socket.destroy();
      }
    });
    client.on('drain', () => this.up?.socket.resume());
  }

  private readonly onData = (d: Buffer): void => {
    if (this.busy && this.reqLeft > 0 && this.up !== null && this.up.connected) {
      // Request body bytes.
      const n = Math.min(d.length, this.reqLeft);
      this.reqLeft -= n;
      if (!this.up.socket.write(n === d.length ? d : d.subarray(0, n))) this.client.pause();
      if (n < d.length) this.pending = d.subarray(n);
      return;
    }
    this.pending = this.pending === null ? d : Buffer.concat([this.pending, d]);
    if (!this.busy) this.nextRequest();
  };

  resumeClient(): void {
    if (!this.closed) this.client.resume();
  }

  private nextRequest(): void {
    const b = this.pending!;
    const end = b.indexOf(CRLF2);
    if (end < 0) {
      if (b.length > MAX_HEAD) this.reply(R400);
      return;
    }
    const headEnd = end + 4;
    // Request line: the version decides the default persistence.
    const lineEnd = b.indexOf(13);
    const v11 = b[lineEnd - 1] === 0x31 && b[lineEnd - 3] === 0x31;
    this.isHead = b[0] === 0x48 && b[1] === 0x45 && b[2] === 0x41 && b[3] === 0x44 && b[4] === 0x20;
    let close = !v11;
    let length = 0;
    let dropFrom = -1;
    let dropTo = -1;
    for (let at = lineEnd + 2; at < end;) {
      const eol = b.indexOf(13, at);
      const c = b[at]! | 0x20;
      if (c === 0x63 && eqName(b, at, 'content-length:')) {
        length = decimal(b, at + 15, eol);
        if (length < 0) return this.reply(R400);
      } else if (c === 0x74 && eqName(b, at, 'transfer-encoding:')) {
        return this.reply(R501);
      } else if (c === 0x63 && eqName(b, at, 'connection:')) {
        const value = b.toString('latin1', at + 11, eol).trim().toLowerCase();
        if (value === 'close') close = true;
        else if (value === 'keep-alive') close = false;
        dropFrom = at;
        dropTo = eol + 2;
      }
      at = eol + 2;
    }
    this.closeClient = close || this.clientEnded;
    // Head without its Connection line, our X-Forwarded-* lines, and the body bytes already here.
    const bodyHere = Math.min(b.length - headEnd, length);
    const parts = dropFrom < 0
      ? [b.subarray(0, end + 2), this.xff, b.subarray(headEnd, headEnd + bodyHere)]
      : [b.subarray(0, dropFrom), b.subarray(dropTo, end + 2), this.xff, b.subarray(headEnd, headEnd + bodyHere)];
    this.out = Buffer.concat(parts);
    this.reqLeft = length - bodyHere;
    this.pending = headEnd + bodyHere < b.length ? b.subarray(headEnd + bodyHere) : null;
    this.busy = true;
    this.gotHead = false;
    this.resHead = null;
    const be = this.pick();
    const pooled = be.idle.pop();
    if (pooled !== undefined) {
      pooled.owner = this;
      this.up = pooled;
      this.send(pooled);
    } else {
      this.up = new Upstream(be, this);
      this.client.pause();
    }
  }

  onUpstreamConnect(up: Upstream): void {
    if (up !== this.up) return;
    this.client.resume();
    this.send(up);
  }

  private send(up: Upstream): void {
    up.socket.write(this.out!);
    this.out = null;
    if (this.reqLeft > 0 && this.pending !== null) {
      const d = this.pending;
      this.pending = null;
      this.onData(d);
    }
  }

  /** Returns whether bytes of `chunk` are still referenced after the call (a queued write, a partial head). */
  onUpstreamData(up: Upstream, chunk: Buffer): boolean {
    if (up !== this.up) return false;
    let from = 0;
    let head: Buffer | null = null;
    if (!this.gotHead) {
      const b = this.resHead === null ? chunk : Buffer.concat([this.resHead, chunk]);
      const end = b.indexOf(CRLF2);
      if (end < 0) {
        if (b.length > MAX_RESPONSE_HEAD) {
          this.fail(up);
          return false;
        }
        this.resHead = b;
        return b === chunk;
      }
      this.resHead = null;
      this.gotHead = true;
      chunk = b;
      from = end + 4;
      head = this.responseHead(b, end);
    }
    let to = chunk.length;
    if (this.frame === F_LENGTH) {
      to = Math.min(chunk.length, from + this.resLeft);
      this.resLeft -= to - from;
      if (this.resLeft === 0) this.frame = F_DONE;
    } else if (this.frame === F_CHUNKED) {
      const e = this.scanChunks(chunk, from);
      if (e >= 0) {
        to = e;
        this.frame = F_DONE;
      }
    } else if (this.frame === F_DONE) {
      to = from;
    }
    let ok: boolean;
    let held = false;
    if (head !== null) {
      // A rewritten head goes out with the body bytes of this read, in one (copied) write.
      ok = this.client.write(to > from ? Buffer.concat([head, chunk.subarray(from, to)]) : head);
    } else {
      // As received (a head passed on unchanged is contiguous with its body): a view of the read
      // buffer, or a copy for TLS, whose writes complete later and would hold the buffer each time.
      const view = to === chunk.length ? chunk : chunk.subarray(0, to);
      ok = this.client.write(this.tls ? Buffer.from(view) : view);
      held = !this.tls && this.client.writableLength > 0;
    }
    if (!ok) up.socket.pause();
    if (this.frame === F_DONE) this.complete(up, to < chunk.length);
    return held;
  }

  /**
   * The response head `b[0, end + 4)`: sets the framing; returns the head to write when its
   * Connection line must change (the client's connection and the backend's part ways), else null.
   */
  private responseHead(b: Buffer, end: number): Buffer | null {
    const lineEnd = b.indexOf(13);
    const v11 = b[7] === 0x31;
    const status = (b[9]! - 48) * 100 + (b[10]! - 48) * 10 + (b[11]! - 48);
    let length = -1;
    let chunked = false;
    let upClose = !v11;
    let connFrom = -1;
    let connTo = -1;
    for (let at = lineEnd + 2; at < end;) {
      const eol = b.indexOf(13, at);
      const c = b[at]! | 0x20;
      if (c === 0x63 && eqName(b, at, 'content-length:')) length = decimal(b, at + 15, eol);
      else if (c === 0x74 && eqName(b, at, 'transfer-encoding:')) chunked = b.toString('latin1', at + 18, eol).trim().toLowerCase().endsWith('chunked');
      else if (c === 0x63 && eqName(b, at, 'connection:')) {
        const value = b.toString('latin1', at + 11, eol).trim().toLowerCase();
        if (value === 'close') upClose = true;
        else if (value === 'keep-alive') upClose = false;
        connFrom = at;
        connTo = eol + 2;
      }
      at = eol + 2;
    }
    this.upstreamCloses = upClose;
    if (this.isHead || status === 204 || status === 304) this.frame = F_DONE;
    else if (chunked) {
      this.frame = F_CHUNKED;
      this.chunkLeft = 0;
      this.chunkState = C_SIZE;
    } else if (length >= 0) {
      this.frame = length === 0 ? F_DONE : F_LENGTH;
      this.resLeft = length;
    } else {
      this.frame = F_EOF;
      this.closeClient = true;
    }
    if (this.closeClient && !upClose) {
      return connFrom < 0
        ? Buffer.concat([b.subarray(0, end + 2), CONNECTION_CLOSE, b.subarray(end + 2, end + 4)])
        : Buffer.concat([b.subarray(0, connFrom), CONNECTION_CLOSE, b.subarray(connTo, end + 4)]);
    }
    if (!this.closeClient && upClose && connFrom >= 0) return Buffer.concat([b.subarray(0, connFrom), b.subarray(connTo, end + 4)]);
    return null;
  }

  /**
   * Scans chunked coding from `from`; returns the index just past the end of the body (last
   * chunk and trailer), or -1 when the body goes on in a later read.
   */
  private scanChunks(b: Buffer, from: number): number {
    let i = from;
    while (i < b.length) {
      const c = b[i]!;
      switch (this.chunkState) {
        case C_SIZE: {
          const h = c >= 48 && c <= 57 ? c - 48 : (c | 0x20) >= 97 && (c | 0x20) <= 102 ? (c | 0x20) - 87 : -1;
          if (h >= 0) this.chunkLeft = this.chunkLeft * 16 + h;
          else this.chunkState = c === 10 ? (this.chunkLeft === 0 ? C_TRAILER_START : C_DATA) : C_EXT;
          i++;
          break;
        }
        case C_EXT:
          if (c === 10) this.chunkState = this.chunkLeft === 0 ? C_TRAILER_START : C_DATA;
          i++;
          break;
        case C_DATA: {
          const n = Math.min(b.length - i, this.chunkLeft);
          i += n;
          this.chunkLeft -= n;
          if (this.chunkLeft === 0) this.chunkState = C_DATA_END;
          break;
        }
        case C_DATA_END:
          if (c === 10) this.chunkState = C_SIZE;
          i++;
          break;
        case C_TRAILER_START:
          i++;
          if (c === 10) return i;
          this.chunkState = c === 13 ? C_LAST : C_TRAILER;
          break;
        case C_TRAILER:
          if (c === 10) this.chunkState = C_TRAILER_START;
          i++;
          break;
        case C_LAST:
          i++;
          if (c === 10) return i;
          break;
      }
    }
    return -1;
  }

  private complete(up: Upstream, extra: boolean): void {
    this.up = null;
    this.busy = false;
    if (this.upstreamCloses || extra) {
      up.owner = null;
      up.socket.destroy();
    } else up.release();
    if (this.closeClient) {
      this.client.end();
      return;
    }
    if (this.pending !== null) this.nextRequest();
  }

  onUpstreamClose(up: Upstream): void {
    if (up !== this.up || this.closed) return;
    this.up = null;
    this.busy = false;
    if (this.frame === F_EOF && this.gotHead) this.client.end();
    else if (!this.gotHead) this.reply(R502);
    else this.client.destroy();
  }

  private fail(up: Upstream): void {
    this.up = null;
    up.owner = null;
    up.socket.destroy();
    this.reply(R502);
  }

  private reply(r: Buffer): void {
    this.busy = true; // nothing more is read
    this.pending = null;
    this.client.end(r);
  }
}

/** The decimal number in b[from, to), spaces around it allowed, or -1 when it is not one. */
function decimal(b: Buffer, from: number, to: number): number {
  let i = from;
  while (i < to && (b[i] === 32 || b[i] === 9)) i++;
  const start = i;
  let n = 0;
  for (; i < to && b[i]! >= 48 && b[i]! <= 57; i++) n = n * 10 + b[i]! - 48;
  if (i === start || i - start > 15) return -1;
  while (i < to && (b[i] === 32 || b[i] === 9)) i++;
  return i === to ? n : -1;
}

function eqName(b: Buffer, at: number, name: string): boolean {
  for (let i = 0; i < name.length; i++) if ((b[at + i]! | 0x20) !== name.charCodeAt(i)) return false;
  return true;
}

// ---- serving --------------------------------------------------------------------------------

export interface RunningRelay {
  /** The bound ports (a port 0 in the spec gets one from the system). */
  ports: { http?: number; tcp?: number; https?: number };
  close(): Promise<void>;
}

/** Serves `spec` in this process; resolves when every listener is bound. */
export async function serveRelay(spec: RelaySpec): Promise<RunningRelay> {
  const backends: Backend[] = spec.backends.map((b) => ({ host: b.host, port: b.port, idle: [] }));
  const servers: Array<[Server, 'http' | 'tcp' | 'https']> = [];
  const sockets = new Set<Socket>();
  const track = (s: Socket) => {
    sockets.add(s);
    s.once('close', () => sockets.delete(s));
  };
  if (spec.ports.tcp !== undefined) {
    const pick = picker(backends);
    servers.push([createServer({ allowHalfOpen: true, noDelay: true }, (c) => {
      track(c);
      const be = pick();
      pipeTcp(c, be.host, be.port);
    }), 'tcp']);
  }
  if (spec.ports.http !== undefined) {
    const pick = picker(backends);
    servers.push([createServer({ allowHalfOpen: true, noDelay: true }, (c) => {
      track(c);
      new HttpRelay(c, pick, false);
    }), 'http']);
  }
  if (spec.ports.https !== undefined) {
    const pick = picker(backends);
    const tls = createTlsServer({
      allowHalfOpen: true, cert: readFileSync(spec.certFile!), key: readFileSync(spec.keyFile!), ciphers: spec.ciphers, minVersion: 'TLSv1.2', honorCipherOrder: true,
    }, (c) => {
      track(c);
      new HttpRelay(c, pick, true);
    });
    tls.on('tlsClientError', (_e, s) => s.destroy());
    servers.push([tls, 'https']);
  }
  const ports: RunningRelay['ports'] = {};
  await Promise.all(servers.map(([server, proto]) => new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen({ host: spec.ip, port: spec.ports[proto], backlog: 4096 }, () => {
      ports[proto] = (server.address() as AddressInfo).port;
      resolve();
    });
  })));
  return {
    ports,
    close: async () => {
      for (const s of sockets) s.destroy();
      for (const b of backends) for (const u of [...b.idle]) u.socket.destroy();
      await Promise.all(servers.map(([server]) => new Promise<void>((resolve) => server.close(() => resolve()))));
    },
  };
}

function main(spec: RelaySpec): void {
  if (spec.workers > 1 && cluster.isPrimary) {
    // Workers accept for themselves, as our data plane's default distribution does.
    cluster.schedulingPolicy = cluster.SCHED_NONE;
    for (let i = 0; i < spec.workers; i++) cluster.fork();
    const died = (_w: unknown, code: number | null, signal: string | null) => {
      process.stderr.write(`relay worker exited (${code ?? signal})\n`);
      process.exit(1);
    };
    cluster.on('exit', died);
    // Stopped by the bench: the workers go first, so that none outlives the primary.
    process.once('SIGTERM', () => {
      cluster.removeListener('exit', died);
      let left = Object.keys(cluster.workers ?? {}).length;
      if (left === 0) process.exit(0);
      cluster.on('exit', () => {
        if (--left === 0) process.exit(0);
      });
      for (const w of Object.values(cluster.workers ?? {})) w?.process.kill('SIGTERM');
    });
    return;
  }
  serveRelay(spec).catch((err: Error) => {
    process.stderr.write(`relay: ${err.stack ?? err.message}\n`);
    process.exit(1);
  });
}

if (process.argv[1] === fileURLToPath(import.meta.url) && process.argv[2] === '--serve') main(JSON.parse(process.argv[3]!) as RelaySpec);
