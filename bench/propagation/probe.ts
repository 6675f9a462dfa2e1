/**
 * Tiny TCP backends that answer their own name on every connection, and a prober that asks a
 * listener which backend it reached. Used to see when traffic follows an API write.
 */
import { connect, createServer, type Server } from 'node:net';

export interface NameServer {
  ip: string;
  port: number;
  close(): Promise<void>;
}

export async function nameServer(ip: string, name: string): Promise<NameServer> {
  const server: Server = createServer((s) => {
    s.on('error', () => s.destroy());
    s.end(name);
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, ip, () => resolve());
  });
  return {
    ip,
    port: (server.address() as { port: number }).port,
    close: () => new Promise((r) => server.close(() => r())),
  };
}

/** Opens one connection and returns what the backend behind it said ('' when refused/reset). */
export function whoAnswers(ip: string, port: number, timeoutMs = 2000): Promise<string> {
  return new Promise((resolve) => {
    let got = '';
    const s = connect({ host: ip, port });
    const timer = setTimeout(() => s.destroy(), timeoutMs);
    s.setEncoding('utf8');
    s.on('data', (d: string) => (got += d));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
  });
}
