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

/** Ports freePort has handed out in this process, per host: never handed out twice. */
const handedOut = new Map<string, Set<number>>();

/**
 * A port nothing listens on now on `host` (bind port 0, read it, close): for configs that must
 * name one. The kernel may give a just-closed port again, so two calls for one file's configs
 * could collide: a port already handed out here is drawn again.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const seen = handedOut.get(host) ?? new Set<number>();
  handedOut.set(host, seen);
  for (;;) {
    const port = await new Promise<number>((resolve, reject) => {
      const s = createServer();
      s.once('error', reject);
      s.listen(0, host, () => {
        const { port: p } = s.address() as { port: number };
        s.close(() => resolve(p));
      });
    });
    if (!seen.has(port)) {
      seen.add(port);
      return port;
    }
  }
}
