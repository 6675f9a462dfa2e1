import { createSocket, type Socket } from 'node:dgram';
import { createServer, type Server } from 'node:net';
import { createServer as createHttpServer, type Server as HttpServer } from 'node:http';
import { freePort } from './tcp.js';

/**
 * Real UDP peers for the data plane's UDP tests: echo backends that answer with their own name,
 * a TCP port beside each for udp_check_port, and client flows (one socket = one source port).
 */

let counter = 0;
/** A fresh address in 127.117.0.0/16, the range the UDP tests keep to (all of 127/8 is local). */
export function udpLoopback(): string {
  counter++;
  return `127.117.${(Math.floor(Math.random() * 200) + counter) % 250 + 1}.${Math.floor(Math.random() * 250) + 1}`;
}

export interface UdpEcho {
  readonly name: string;
  readonly ip: string;
  readonly port: number;
  readonly address: string;
  /** Datagrams received. */
  received: number;
  close(): Promise<void>;
}

/** A UDP backend on `ip` answering each datagram with `<name>:<datagram>`. */
export function startUdpEcho(name: string, ip: string, port = 0): Promise<UdpEcho> {
  const sock = createSocket('udp4');
  return new Promise((resolve, reject) => {
    sock.once('error', reject);
    sock.bind(port, ip, () => {
      const bound = sock.address().port;
      const echo: UdpEcho = {
        name, ip, port: bound, address: `${ip}:${bound}`, received: 0,
        close: () => new Promise<void>((r) => {
          try {
            sock.close(() => r());
          } catch {
            r();
          }
        }),
      };
      sock.on('message', (msg, from) => {
        echo.received++;
        sock.send(Buffer.concat([Buffer.from(`${name}:`), msg]), from.port, from.address);
      });
      resolve(echo);
    });
  });
}

/** A TCP listener on ip:port (the udp_check_port a connection check connects to). */
export function startTcpPort(ip: string, port: number): Promise<{ close(): Promise<void> }> {
  const srv: Server = createServer((s) => s.destroy());
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, ip, () => resolve({ close: () => new Promise<void>((r) => srv.close(() => r())) }));
  });
}

/** A free port number on all of `ips` for TCP (freePort on the first, then check the others). */
export async function commonTcpPort(ips: string[]): Promise<number> {
  for (let attempt = 0; attempt < 20; attempt++) {
    const port = await freePort(ips[0]);
    const held: { close(): Promise<void> }[] = [];
    try {
      for (const ip of ips.slice(1)) held.push(await startTcpPort(ip, port));
      return port;
    } catch {
      // Taken on one of them: try another.
    } finally {
      for (const h of held) await h.close();
    }
  }
  throw new Error('no common free port');
}

/** One client flow: a socket with its own source port, asking and waiting for one answer. */
export class UdpFlow {
  private readonly sock: Socket;
  private readonly waiting: Array<(msg: string) => void> = [];
  readonly answers: string[] = [];
  ready: Promise<void>;

  constructor(private readonly ip: string, private readonly port: number, source = '127.0.0.1') {
    this.sock = createSocket('udp4');
    this.sock.on('message', (msg) => {
      const text = msg.toString();
      this.answers.push(text);
      this.waiting.shift()?.(text);
    });
    this.ready = new Promise((resolve) => this.sock.bind(0, source, () => resolve()));
  }

  /** Sends `msg`; resolves with the answer, or null when none came within `timeoutMs`. */
  async ask(msg: string, timeoutMs = 2000): Promise<string | null> {
    await this.ready;
    return new Promise((resolve) => {
      let done = false;
      const timer = setTimeout(() => {
        done = true;
        const i = this.waiting.indexOf(got);
        if (i >= 0) this.waiting.splice(i, 1);
        resolve(null);
      }, timeoutMs);
      const got = (text: string) => {
        if (done) return;
        clearTimeout(timer);
        resolve(text);
      };
      this.waiting.push(got);
      this.sock.send(msg, this.port, this.ip);
    });
  }

  /** The answering backend's name (`<name>:...`), or null when none answered. */
  async who(msg = 'ping', timeoutMs = 2000): Promise<string | null> {
    const a = await this.ask(msg, timeoutMs);
    return a === null ? null : a.slice(0, a.indexOf(':'));
  }

  /** Sends without waiting (several flows in one tick). */
  async send(msg: string): Promise<void> {
    await this.ready;
    this.sock.send(msg, this.port, this.ip);
  }

  close(): void {
    try {
      this.sock.close();
    } catch {
      // already closed
    }
  }
}

/** An HTTP server on ip:port answering /health with `status` (settable): what an http check on udp_check_port sees. */
export function startHealthPort(ip: string, port: number): Promise<{ status: number; hits: number; close(): Promise<void> }> {
  const state = { status: 200, hits: 0, close: () => Promise.resolve() };
  const srv: HttpServer = createHttpServer((req, res) => {
    if (req.url === '/health') state.hits++;
    res.writeHead(req.url === '/health' ? state.status : 404, { connection: 'close' }).end('ok');
  });
  state.close = () => new Promise<void>((r) => {
    srv.closeAllConnections();
    srv.close(() => r());
  });
  return new Promise((resolve, reject) => {
    srv.once('error', reject);
    srv.listen(port, ip, () => resolve(state));
  });
}
