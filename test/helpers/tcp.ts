import { createConnection, createServer, type Server } from 'node:net';

/** A TCP backend on its own loopback address that answers every chunk with `<name>:<chunk>`. */
export async function echoBackend(host: string, name: string, port = 0): Promise<{ server: Server; port: number; close(): Promise<void> }> {
  const server = createServer((sock) => {
    sock.on('data', (d) => sock.write(`${name}:${d.toString()}`));
    sock.on('error', () => undefined);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  const addr = server.address();
  return {
    server,
    port: typeof addr === 'object' && addr ? addr.port : port,
    close: () => new Promise<void>((r) => server.close(() => r())),
  };
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
    sock.once('error', (e) => {
      clearTimeout(timer);
      reject(e);
    });
    sock.once('close', () => {
      clearTimeout(timer);
      reject(new Error('closed without an answer'));
    });
  });
}
