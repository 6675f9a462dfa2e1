import { createServer, connect, type Server, type Socket } from 'node:net';
import { unmapIpv4 } from '../../lib/ipv4.js';
import type { Logger } from '../../lib/logger.js';
import { proxyV1 } from '../../lib/proxy-protocol.js';
import { compileAllowList } from './allow-list.js';

export interface Backend {
  host: string;
  port: number;
}

/**
 * One stable database endpoint (hosts.primary:3306 or hosts.secondary:3306): a TCP proxy that
 * admits clients by source address (allow_list), picks a backend node (the primary, or the
 * replicas round-robin) and passes bytes through untouched, so TLS stays end to end between
 * client and server. Each backend connection starts with a PROXY protocol v1 header carrying
 * the client's address, so the server's accounts (which mirror allow_list) see the real client;
 * it is dialled from the endpoint's own address, which is the only one the server accepts that
 * header from (proxy_protocol_networks).
 *
 * Changes apply at once: a new allow_list also closes established connections it no longer
 * admits; a new backend set closes connections to nodes no longer in it (after a failover or
 * switchover the clients reconnect to the new primary instead of talking to a read-only node).
 */
export interface FrontProxy {
  readonly host: string;
  readonly port: number;
  listen(): Promise<void>;
  setBackends(backends: Backend[]): void;
  setAllowList(entries: string[]): void;
  /** Connections currently proxied. */
  connections(): number;
  close(): Promise<void>;
}

export function createFrontProxy(opts: { host: string; port: number; logger: Logger; name: string }): FrontProxy {
  const log = opts.logger.child({ component: 'front-proxy', endpoint: `${opts.host}:${opts.port}`, name: opts.name });
  let allowed = compileAllowList([]);
  let backends: Backend[] = [];
  let rr = 0;
  const live = new Set<{ client: Socket; upstream: Socket; backend: Backend; source: string }>();
  let server: Server | undefined;

  const key = (b: Backend) => `${b.host}:${b.port}`;

  function onConnection(client: Socket): void {
    const source = unmapIpv4(client.remoteAddress ?? '');
    if (!allowed(source) || backends.length === 0) {
      client.destroy();
      return;
    }
    const backend = backends[rr++ % backends.length]!;
    const upstream = connect({ host: backend.host, port: backend.port, localAddress: opts.host });
    const entry = { client, upstream, backend, source };
    live.add(entry);
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    upstream.write(proxyV1({ srcIp: source, srcPort: client.remotePort ?? 0, dstIp: opts.host, dstPort: opts.port }));
    client.pipe(upstream);
    upstream.pipe(client);
    const done = () => {
      live.delete(entry);
      client.destroy();
      upstream.destroy();
    };
    client.on('error', done);
    upstream.on('error', done);
    client.on('close', done);
    upstream.on('close', done);
  }

  return {
    host: opts.host,
    port: opts.port,
    async listen() {
      if (server) return;
      const s = createServer({ noDelay: true }, onConnection);
      await new Promise<void>((resolve, reject) => {
        s.once('error', reject);
        s.listen(opts.port, opts.host, () => {
          s.off('error', reject);
          resolve();
        });
      });
      s.on('error', (err) => log.error({ err }, 'listener error'));
      server = s;
    },
    setBackends(next) {
      const keep = new Set(next.map(key));
      const changed = next.length !== backends.length || next.some((b, i) => key(b) !== key(backends[i]!));
      backends = [...next];
      if (!changed) return;
      log.info({ backends: next.map(key) }, 'backends changed');
      for (const e of live) {
        if (!keep.has(key(e.backend))) {
          e.client.destroy();
          e.upstream.destroy();
        }
      }
    },
    setAllowList(entries) {
      allowed = compileAllowList(entries);
      for (const e of live) {
        if (!allowed(e.source)) {
          e.client.destroy();
          e.upstream.destroy();
        }
      }
    },
    connections: () => live.size,
    async close() {
      for (const e of live) {
        e.client.destroy();
        e.upstream.destroy();
      }
      live.clear();
      const s = server;
      server = undefined;
      if (s) await new Promise<void>((resolve) => s.close(() => resolve()));
    },
  };
}
