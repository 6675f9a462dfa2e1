import { createHash } from 'node:crypto';
import { createServer as createHttpServer, type IncomingMessage, type Server as HttpServer, type ServerResponse } from 'node:http';
import { createServer as createNetServer, type Server as NetServer, type Socket } from 'node:net';
import { parseProxyHeader, type ParsedProxyHeader } from '../../lib/proxy-protocol.js';
import { until } from './lab.js';

let counter = 0;
/**
 * A fresh loopback address for a test server or client. Random second/third octets keep
 * parallel test files (and other suites) apart; the first octet block 160-169 is this helper's.
 */
export function loopback(): string {
  counter++;
  const a = 160 + Math.floor(Math.random() * 10);
  const b = Math.floor(Math.random() * 250) + 1;
  const c = ((counter * 7 + Math.floor(Math.random() * 250)) % 250) + 1;
  return `127.${a}.${b}.${c}`;
}

/** Polls until `fn` returns truthy (or throws on timeout). Never sleeps a guessed time. */
export async function waitFor<T>(fn: () => T | Promise<T>, timeoutMs = 10_000, what = 'condition'): Promise<NonNullable<T>> {
  return until(what, async () => ((await fn()) || undefined) as NonNullable<T> | undefined, timeoutMs, 20);
}

/** Deterministic bytes so that a download can be checksummed on both ends. */
export function patternBytes(n: number, seed = 1): Buffer {
  const b = Buffer.alloc(n);
  let x = seed >>> 0 || 1;
  for (let i = 0; i < n; i++) {
    x ^= x << 13; x >>>= 0; x ^= x >>> 17; x ^= x << 5; x >>>= 0;
    b[i] = x & 0xff;
  }
  return b;
}

export function sha256(b: Buffer | string): string {
  return createHash('sha256').update(b).digest('hex');
}

interface Stoppable {
  readonly ip: string;
  readonly port: number;
  readonly address: string;
  /** Stops listening and cuts every open connection (a crashed backend). */
  kill(): Promise<void>;
  /** Listens again on the same ip:port. */
  revive(): Promise<void>;
  close(): Promise<void>;
}

async function listenOn(server: NetServer | HttpServer, ip: string, port: number): Promise<number> {
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, ip, () => {
      server.removeListener('error', reject);
      resolve();
    });
  });
  return (server.address() as { port: number }).port;
}

export interface HttpBackend extends Stoppable {
  readonly name: string;
  /** Requests served since start (all paths except /health). */
  hits: number;
  /** Requests to /health. */
  healthHits: number;
  /** Last request's headers, for header assertions. */
  lastHeaders: IncomingMessage['headers'] | null;
  /** Overrides: status for /health, body for /health. */
  healthStatus: number;
  healthBody: string;
  /** Status code for normal requests (default 200). */
  status: number;
}

/**
 * A real HTTP backend (node:http is fine on this side). Routes:
 * /health (healthStatus + healthBody), /download?bytes=N[&seed=S][&chunked=1][&slowMs=M],
 * /upload (answers the sha256 of the body), anything else: `name` as the body.
 * WebSocket-style Upgrade: answers 101 and echoes raw bytes.
 */
export async function startHttpBackend(name: string, ip = loopback()): Promise<HttpBackend> {
  const state = {
    name, hits: 0, healthHits: 0, lastHeaders: null as IncomingMessage['headers'] | null,
    healthStatus: 200, healthBody: `ok ${name}`, status: 200,
  };
  const handler = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://x');
    if (url.pathname === '/health') {
      state.healthHits++;
      res.writeHead(state.healthStatus, { 'content-type': 'text/plain' }).end(state.healthBody);
      return;
    }
    state.hits++;
    state.lastHeaders = req.headers;
    res.setHeader('x-backend', name);
    if (url.pathname === '/upload') {
      const h = createHash('sha256');
      let n = 0;
      req.on('data', (d: Buffer) => { h.update(d); n += d.length; });
      req.on('end', () => res.writeHead(200, { 'content-type': 'text/plain' }).end(`${n} ${h.digest('hex')}`));
      return;
    }
    if (url.pathname === '/download') {
      const total = Number(url.searchParams.get('bytes') ?? '0');
      const data = patternBytes(total, Number(url.searchParams.get('seed') ?? '1'));
      const slowMs = Number(url.searchParams.get('slowMs') ?? '0');
      const headers: Record<string, string> = { 'content-type': 'application/octet-stream' };
      if (!url.searchParams.get('chunked')) headers['content-length'] = String(total);
      res.writeHead(200, headers);
      let off = 0;
      const step = 64 * 1024;
      const pump = () => {
        while (off < total) {
          const ok = res.write(data.subarray(off, Math.min(total, off + step)));
          off += step;
          if (slowMs > 0) return void setTimeout(pump, slowMs);
          if (!ok) return void res.once('drain', pump);
        }
        res.end();
      };
      pump();
      return;
    }
    req.resume();
    req.on('end', () => res.writeHead(state.status, { 'content-type': 'text/plain' }).end(name));
  };
  const make = () => {
    const s = createHttpServer({ keepAliveTimeout: 30_000 }, handler);
    s.on('upgrade', (req: IncomingMessage, sock: Socket, head: Buffer) => {
      state.hits++;
      state.lastHeaders = req.headers;
      sock.write(`HTTP/1.1 101 Switching Protocols\r\nUpgrade: ${req.headers.upgrade}\r\nConnection: Upgrade\r\nX-Backend: ${name}\r\n\r\n`);
      if (head.length) sock.write(head);
      sock.pipe(sock);
    });
    return s;
  };
  const first = make();
  const port = await listenOn(first, ip, 0);
  return Object.assign(state, stoppableFromExisting(first, make, ip, port)) as HttpBackend;
}

function stoppableFromExisting(first: NetServer | HttpServer, make: () => NetServer | HttpServer, ip: string, port: number): Stoppable {
  let server = first;
  const sockets = new Set<Socket>();
  const track = (s: NetServer | HttpServer) => s.on('connection', (sock: Socket) => {
    sockets.add(sock);
    sock.on('close', () => sockets.delete(sock));
  });
  track(server);
  const kill = async () => {
    for (const s of sockets) s.destroy();
    if (server.listening) await new Promise<void>((r) => server.close(() => r()));
  };
  return {
    ip, port, address: `${ip}:${port}`,
    kill,
    async revive() {
      server = make();
      track(server);
      await listenOn(server, ip, port);
    },
    close: kill,
  };
}

export interface TcpBackend extends Stoppable {
  readonly name: string;
  connections: number;
  /** PROXY headers received (when expectProxy). */
  proxyHeaders: ParsedProxyHeader[];
  /** Sockets currently open on the backend. */
  open: number;
}

/**
 * A TCP backend. Default behaviour: sends `name\n` on connect, then echoes. With `expectProxy`,
 * it first parses a PROXY v1/v2 header (aborting on an invalid one) and records it.
 */
export async function startTcpBackend(name: string, opts: { ip?: string; expectProxy?: boolean; greet?: boolean; onSocket?: (s: Socket) => void } = {}): Promise<TcpBackend> {
  const ip = opts.ip ?? loopback();
  const state = { name, connections: 0, proxyHeaders: [] as ParsedProxyHeader[], open: 0 };
  const make = () => createNetServer({ allowHalfOpen: true }, (sock) => {
    state.connections++;
    state.open++;
    sock.on('close', () => state.open--);
    sock.on('error', () => sock.destroy());
    const serve = (rest: Buffer) => {
      if (opts.onSocket) {
        if (rest.length) sock.unshift(rest);
        return opts.onSocket(sock);
      }
      if (opts.greet !== false) sock.write(`${name}\n`);
      if (rest.length) sock.write(rest);
      sock.pipe(sock);
    };
    if (!opts.expectProxy) return serve(Buffer.alloc(0));
    let buf = Buffer.alloc(0);
    const onData = (d: Buffer) => {
      buf = Buffer.concat([buf, d]);
      let h: ParsedProxyHeader | undefined;
      try {
        h = parseProxyHeader(buf);
      } catch {
        sock.destroy();
        return;
      }
      if (!h) return;
      sock.removeListener('data', onData);
      state.proxyHeaders.push(h);
      sock.pause();
      serve(buf.subarray(h.length));
      sock.resume();
    };
    sock.on('data', onData);
  });
  const first = make();
  const port = await listenOn(first, ip, 0);
  return Object.assign(state, stoppableFromExisting(first, make, ip, port)) as TcpBackend;
}
