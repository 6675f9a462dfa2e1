import { connect, type Socket } from 'node:net';

/** Opens a TCP connection from `localAddress` and resolves once connected. */
export function tcpConnect(ip: string, port: number, localAddress?: string): Promise<Socket> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: ip, port, localAddress, allowHalfOpen: true });
    s.once('connect', () => resolve(s));
    s.once('error', reject);
  });
}

/** Connects, reads until the first newline (the backend's greeting) and returns it. */
export async function greeting(ip: string, port: number, localAddress?: string): Promise<string> {
  const s = await tcpConnect(ip, port, localAddress);
  try {
    return await readLine(s);
  } finally {
    s.destroy();
  }
}

export function readLine(s: Socket): Promise<string> {
  return new Promise((resolve, reject) => {
    let buf = '';
    const onData = (d: Buffer) => {
      buf += d.toString('latin1');
      const i = buf.indexOf('\n');
      if (i >= 0) {
        s.removeListener('data', onData);
        resolve(buf.slice(0, i));
      }
    };
    s.on('data', onData);
    s.once('error', reject);
    s.once('end', () => resolve(buf));
    s.once('close', () => resolve(buf));
  });
}

/** Reads everything until the peer ends. */
export function readAll(s: Socket): Promise<Buffer> {
  return new Promise((resolve, reject) => {
    const chunks: Buffer[] = [];
    s.on('data', (d: Buffer) => chunks.push(d));
    s.once('end', () => resolve(Buffer.concat(chunks)));
    s.once('close', () => resolve(Buffer.concat(chunks)));
    s.once('error', reject);
  });
}
