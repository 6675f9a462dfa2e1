import { request, Agent, type IncomingHttpHeaders } from 'node:http';
import { request as httpsRequest } from 'node:https';
import type { Socket } from 'node:net';

export interface Resp {
  status: number;
  headers: IncomingHttpHeaders;
  body: Buffer;
  socket: Socket;
}

/** A plain HTTP request through node:http (the client side may use it). */
export function get(url: string, opts: { localAddress?: string; agent?: Agent | false; headers?: Record<string, string>; method?: string; body?: Buffer | string } = {}): Promise<Resp> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: opts.method ?? 'GET', localAddress: opts.localAddress, agent: opts.agent ?? false, headers: opts.headers }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), socket: res.socket as Socket }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(opts.body);
  });
}

export function httpsGet(url: string, opts: { ca?: string; minVersion?: 'TLSv1.2' | 'TLSv1.3'; maxVersion?: 'TLSv1.2' | 'TLSv1.3'; ciphers?: string; servername?: string; localAddress?: string }): Promise<Resp & { protocol: string | null; cert: { subject: { CN?: string } } }> {
  return new Promise((resolve, reject) => {
    const req = httpsRequest(url, { agent: false, ca: opts.ca, minVersion: opts.minVersion, maxVersion: opts.maxVersion, ciphers: opts.ciphers, servername: opts.servername, localAddress: opts.localAddress }, (res) => {
      const chunks: Buffer[] = [];
      const sock = res.socket as import('node:tls').TLSSocket;
      const protocol = sock.getProtocol();
      const cert = sock.getPeerCertificate() as unknown as { subject: { CN?: string } };
      res.on('data', (d: Buffer) => chunks.push(d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body: Buffer.concat(chunks), socket: res.socket as Socket, protocol, cert }));
    });
    req.on('error', reject);
    req.end();
  });
}
