import { createServer, connect, type Server, type Socket } from 'node:net';
import { ConcurrencyCap } from '../../lib/conn-cap.js';
import { unmapIpv4 } from '../../lib/ipv4.js';
import type { Logger } from '../../lib/logger.js';
import { proxyV1 } from '../../lib/proxy-protocol.js';
import { compileAllowList } from './allow-list.js';

export interface Backend {
  host: string;
  port: number;
  /**
   * The node's Unix socket, which the proxy dials instead of host:port. It is the only place the
   * node accepts a PROXY header from (proxy_protocol_networks=localhost), and its directory is
   * closed to other local users, so none of them can claim a client address
   * (docs/security/mysql.md). Without it (tests of the proxy alone) the proxy dials TCP.
   */
  socketPath?: string;
}

/**
 * One stable database endpoint (hosts.primary:3306 or hosts.secondary:3306): a TCP proxy that
 * admits clients by source address (allow_list), picks a backend node (the primary, or the
 * replicas round-robin) and passes bytes through untouched, so TLS stays end to end between
 * client and server. Each backend connection starts with a PROXY protocol v1 header carrying
 * the client's address, so the server's accounts (which mirror allow_list) see the real client;
 * it is dialled over the node's Unix socket (see Backend.socketPath).
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
  /** Refuse clients whose handshake response does not ask for TLS (see requireTlsGate). */
  setRequireTls(on: boolean): void;
  /** Connections currently proxied. */
  connections(): number;
  close(): Promise<void>;
}

/**
 * Accept-side limits of one endpoint (docs/agent.md §4, docs/security/traffic.md). The defaults
 * follow the server behind it: one client address needs no more connections than the server
 * accepts (max_connections=200, mysql/config-render.ts), and twice that in all leaves room for
 * the ones the server is about to refuse. An hour without a byte either way ends a session, so
 * abandoned clients do not hold descriptors for the server's 8 h wait_timeout, while pools that
 * recycle connections within 30 minutes (the common default) never meet it.
 */
export const FRONT_PROXY_LIMITS = { perClient: 200, total: 400, idleTimeoutMs: 3_600_000 };

export type FrontProxyRefusal = 'client_cap' | 'total_cap';

export interface FrontProxyOptions {
  host: string;
  port: number;
  logger: Logger;
  name: string;
  /** Concurrent connections per client address and in all (0 disables), idle timeout (0 = none). */
  limits?: Partial<typeof FRONT_PROXY_LIMITS>;
  /** Called for every connection refused by a cap (the agent's refusal metric). */
  onRefused?: (reason: FrontProxyRefusal) => void;
}

export function createFrontProxy(opts: FrontProxyOptions): FrontProxy {
  const log = opts.logger.child({ component: 'front-proxy', endpoint: `${opts.host}:${opts.port}`, name: opts.name });
  const limits = { ...FRONT_PROXY_LIMITS, ...opts.limits };
  const caps = new ConcurrencyCap(limits.perClient, limits.total);
  let allowed = compileAllowList([]);
  let backends: Backend[] = [];
  let rr = 0;
  let requireTls = false;
  const live = new Set<{ client: Socket; upstream: Socket; backend: Backend; source: string }>();
  let server: Server | undefined;

  const key = (b: Backend) => `${b.host}:${b.port}${b.socketPath ? `@${b.socketPath}` : ''}`;

  function onConnection(client: Socket): void {
    const source = unmapIpv4(client.remoteAddress ?? '');
    if (!allowed(source) || backends.length === 0) {
      client.destroy();
      return;
    }
    const refused = caps.admit(source);
    if (refused !== null) {
      // Closed at once, before a byte, like the data plane's caps.
      opts.onRefused?.(refused === 'total' ? 'total_cap' : 'client_cap');
      client.resetAndDestroy();
      return;
    }
    client.once('close', () => caps.release(source));
    // Everything proxied passes through the client socket, so its idle timer covers both ways.
    if (limits.idleTimeoutMs > 0) {
      client.setTimeout(limits.idleTimeoutMs);
      client.once('timeout', () => client.destroy());
    }
    const backend = backends[rr++ % backends.length]!;
    const upstream = backend.socketPath ? connect({ path: backend.socketPath }) : connect({ host: backend.host, port: backend.port, localAddress: opts.host });
    const entry = { client, upstream, backend, source };
    live.add(entry);
    upstream.setNoDelay(true);
    client.setNoDelay(true);
    upstream.write(proxyV1({ srcIp: source, srcPort: client.remotePort ?? 0, dstIp: opts.host, dstPort: opts.port }));
    if (requireTls) requireTlsGate(client, upstream);
    else client.pipe(upstream);
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
    setRequireTls(on) {
      requireTls = on;
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

/** CLIENT_SSL in the capability flags of a MySQL/MariaDB handshake response. */
const CLIENT_SSL = 0x800;

/**
 * ssl_connection at the proxy. The server cannot enforce it on proxied clients: they arrive
 * over its Unix socket, which MariaDB counts as a secure transport whatever the PROXY header
 * says, so require_secure_transport does not apply to them. The client's first packet (the
 * handshake response, or the SSL request that precedes TLS) must carry CLIENT_SSL; a client
 * that sets it and then does not speak TLS fails at the server. A client that does not is
 * answered with the server's own error for it and disconnected; nothing it sent reaches the
 * node.
 */
function requireTlsGate(client: Socket, upstream: Socket): void {
  let head = Buffer.alloc(0);
  const onData = (chunk: Buffer) => {
    head = Buffer.concat([head, chunk]);
    if (head.length < 8) return;
    client.off('data', onData);
    if (head.readUInt32LE(4) & CLIENT_SSL) {
      upstream.write(head);
      client.pipe(upstream);
      return;
    }
    upstream.destroy();
    const msg = Buffer.from('HY000Connections using insecure transport are prohibited while --require_secure_transport=ON.');
    const body = Buffer.concat([Buffer.from([0xff, 0x57, 0x0c, 0x23]), msg]);
    const header = Buffer.from([body.length & 0xff, (body.length >> 8) & 0xff, 0, head[3]! + 1]);
    client.end(Buffer.concat([header, body]));
  };
  client.on('data', onData);
}
