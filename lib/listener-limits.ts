import type { Server as HttpServer, ServerOptions } from 'node:http';
import type { Socket } from 'node:net';
import { clientKey } from './client-key.js';
import { ConcurrencyCap, type CapRefusal } from './conn-cap.js';
import { parseIpv4, unmapIpv4 } from './ipv4.js';
import { parseIpv6 } from './ipv6.js';

/**
 * Limits of the control plane's HTTP listeners, the API and the bootstrap endpoint
 * (docs/security/api.md, "Slow and idle clients"): how long a client may take to send a request,
 * how long a connection may sit idle, and how many connections may be open at once, in all and
 * per client address. Without them a client with no token holds descriptors for as long as it
 * likes (one byte every few seconds keeps a request alive) until the process accepts nothing.
 */
export interface ListenerLimits {
  /** Headers and body of a request must have arrived within this (ms); 408 and closed otherwise. 0 = none. */
  requestTimeoutMs: number;
  /** A connection with no bytes either way for this long, or idle between kept-alive requests, is closed (ms). 0 = none. */
  idleTimeoutMs: number;
  /** Connections open at once on the listener; over it a new one is closed at accept. 0 = no cap. */
  maxConnections: number;
  /** Connections open at once from one client address (an IPv6 client by its /64). 0 = no cap. */
  maxConnectionsPerAddress: number;
  /**
   * The prefix an IPv6 client is counted by for `maxConnectionsPerAddress` (lib/client-key.ts):
   * the same `--client-ipv6-prefix` as the API's per-address rate limit. Unset = /64.
   */
  clientIpv6Prefix?: number;
}

/**
 * Far above what a real client does (linode-cli, Terraform with its default parallelism of 10,
 * the console) and what the existing tests open, and far below the unit's 65,536 descriptors.
 */
export const defaultApiListenerLimits: ListenerLimits = {
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 75_000,
  maxConnections: 4096,
  maxConnectionsPerAddress: 256,
};

/** A host joins or renews once in a while, with two requests: a small listener is plenty. */
export const defaultBootstrapListenerLimits: ListenerLimits = {
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 75_000,
  maxConnections: 512,
  maxConnectionsPerAddress: 16,
};

/** 127.0.0.0/8, ::1 (and ::ffff:127.x.y.z), or localhost: reachable from this host only. */
export function isLoopbackHost(host: string): boolean {
  if (host === 'localhost') return true;
  const v4 = parseIpv4(unmapIpv4(host));
  if (v4 !== undefined) return v4 >>> 24 === 127;
  return parseIpv6(host) === 1n;
}

/**
 * Options for `http.createServer`/`https.createServer` (and fastify's `http`/`https`), which only
 * take these at construction: Node looks for expired requests every `connectionsCheckingInterval`
 * (30 s by default), too coarse for a short request timeout. A TLS client that never finishes its
 * handshake is held by `handshakeTimeout` (120 s by default), not by the request timeout.
 */
export function listenerServerOptions(limits: ListenerLimits): ServerOptions & { handshakeTimeout?: number } {
  const t = limits.requestTimeoutMs;
  return {
    requestTimeout: t,
    headersTimeout: t,
    keepAliveTimeout: limits.idleTimeoutMs,
    ...(t > 0 ? { connectionsCheckingInterval: Math.min(30_000, Math.max(100, Math.floor(t / 4))), handshakeTimeout: t } : {}),
  };
}

/**
 * Applies the limits to a listening-to-be server: the timeouts (again, since fastify sets its own
 * after construction), the total cap (Node's `maxConnections`, which closes the socket before any
 * HTTP or TLS work) and the per-address cap, counted at the `connection` event ahead of the HTTP
 * and TLS listeners, so a refused socket is closed at once and costs nothing more. `refused` is
 * told of every socket closed by a cap.
 */
export function limitListener(server: HttpServer, limits: ListenerLimits, refused: (cap: CapRefusal) => void = () => {}): ConcurrencyCap {
  server.requestTimeout = limits.requestTimeoutMs;
  server.headersTimeout = limits.requestTimeoutMs;
  server.keepAliveTimeout = limits.idleTimeoutMs;
  server.setTimeout(limits.idleTimeoutMs);
  if (limits.maxConnections > 0) server.maxConnections = limits.maxConnections;
  server.on('drop', () => refused('total'));
  const perAddress = new ConcurrencyCap(limits.maxConnectionsPerAddress, 0);
  server.prependListener('connection', (socket: Socket) => {
    // Keyed as every per-client limit is (lib/client-key.ts): an IPv6 client by its prefix.
    const key = clientKey(socket.remoteAddress ?? '', limits.clientIpv6Prefix);
    if (perAddress.admit(key) !== null) {
      refused('per_key');
      socket.destroy();
      return;
    }
    socket.once('close', () => perAddress.release(key));
  });
  return perAddress;
}
