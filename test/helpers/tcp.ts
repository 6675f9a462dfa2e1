import { createConnection, createServer } from 'node:net';
import { startTcpBackend, type TcpBackend } from './backends.js';

/** A TCP backend on its own loopback address that answers every chunk with `<name>:<chunk>`. */
export function echoBackend(host: string, name: string): Promise<TcpBackend> {
  return startTcpBackend(name, {
    ip: host,
    onSocket: (sock) => {
      sock.on('data', (d) => sock.write(`${name}:${d.toString()}`));
      sock.on('end', () => sock.end());
    },
  });
}

/** Connects, sends `msg`, resolves with the first answer (or rejects on refusal/close/timeout). */
export function ask(host: string, port: number, msg: string, opts: { localAddress?: string; timeoutMs?: number } = {}): Promise<string> {
  return new Promise((resolve, reject) => {
    const sock = createConnection({ host, port, localAddress: opts.localAddress });
    const timer = setTimeout(() => {
      sock.destroy();
      reject(new Error('timeout'));
    }, opts.timeoutMs ?? 3000);
    sock.once('connect', () => sock.write(msg));
    sock.once('data', (d) => {
      clearTimeout(timer);
      sock.end();
      resolve(d.toString());
    });
    sock.on('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.once('close', () => {
      clearTimeout(timer);
      reject(new Error('closed without an answer'));
    });
  });
}

/**
 * Where freePort draws from: below the kernel's ephemeral range (32768-60999 here), so no
 * outgoing connection of another test can take a port between freePort's check and its user's
 * bind (the kernel gives a connect() its local port from that range only). Bind 0 used to be
 * the way, and once the lab's child found its port taken as the local end of another test's
 * connection (EADDRINUSE in CI).
 */
const RANGE = { low: 10_000, high: 32_767 };
/** Fixed ports of tests that must bind the same port twice (test/e2e/lab-restart.test.ts). */
const RESERVED = { low: 24_600, high: 24_619 };

/** Ports freePort has handed out in this process, per host: never handed out twice. */
const handedOut = new Map<string, Set<number>>();
/**
 * Each process walks the range from its own starting point (from its pid), so two test files
 * running side by side (the lanes) draw from different stretches rather than racing for the
 * same numbers between one's check and its bind.
 */
let cursor = RANGE.low + ((process.pid * 7919) % (RANGE.high - RANGE.low + 1));

function nextCandidate(): number {
  const port = cursor;
  cursor = cursor >= RANGE.high ? RANGE.low : cursor + 1;
  return port;
}

function canBind(port: number, host: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = createServer();
    s.once('error', () => resolve(false));
    s.listen(port, host, () => s.close(() => resolve(true)));
  });
}

/**
 * A port nothing listens on now on `host`, for configs that must name one: the next one of
 * this process's walk that binds, never one handed out before in this process.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const seen = handedOut.get(host) ?? new Set<number>();
  handedOut.set(host, seen);
  for (let tries = 0; tries <= RANGE.high - RANGE.low; tries++) {
    const port = nextCandidate();
    if (seen.has(port) || (port >= RESERVED.low && port <= RESERVED.high)) continue;
    if (await canBind(port, host)) {
      seen.add(port);
      return port;
    }
  }
  throw new Error(`freePort: no free port on ${host} in ${RANGE.low}-${RANGE.high}`);
}
