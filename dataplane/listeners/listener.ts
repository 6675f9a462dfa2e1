import cluster from 'node:cluster';
import { createServer, type Server, type Socket } from 'node:net';
import type { TLSSocket } from 'node:tls';
import type { Clock } from '../../lib/clock.js';
import { unmapIpv4 } from '../../lib/ipv4.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigRuntime } from '../runtime/config-runtime.js';
import type { ConnLimits } from '../throttle/conn-limits.js';
import type { ConnThrottle } from '../throttle/conn-throttle.js';
import { TcpSession } from './tcp-session.js';
import { HttpSession } from './http-session.js';
import type { WildcardPorts } from './wildcard-ports.js';

/**
 * One listening socket per (NodeBalancer ipv4, config port). The socket is bound once and kept
 * while any config uses the address; which config (and protocol) it serves is the `rt` pointer,
 * swapped atomically by the engine. Connections keep the runtime they were accepted with.
 * https: the raw socket is handed to the config's (never listening) tls.Server, whose secure
 * context can be replaced without rebinding.
 */
/**
 * What the workers of one data plane must agree on at accept (docs/dataplane.md, "Workers"):
 * client_conn_throttle over the whole data plane, and the `table` stickiness entry of a client
 * not pinned here yet. Resolves false when the throttle refuses the client. The throttle counts
 * `key` (the client key, lib/client-key.ts); the table pins `ip`, the client's own address.
 */
export interface SharedAdmission {
  admit(rt: ConfigRuntime, ip: string, key: string): Promise<boolean>;
}

const ignore = (): void => undefined;
/** Connections a listener holds before its first config (see `early`). */
const EARLY_MAX = 4096;

export class Listener {
  /** Its own socket, or null when it is served through a shared wildcard socket (`ports`). */
  private readonly server: Server | null;
  rt: ConfigRuntime | null = null;
  private readonly sockets = new Set<Socket>();
  private draining = false;
  /**
   * Connections accepted between listen() and the first swap. Alone, nobody connects to an
   * address not served yet; a worker, though, joins a socket its peers already serve, so it may
   * be handed connections at once (docs/dataplane.md, "Workers"). They wait for `serve()`.
   */
  private early: Socket[] | null = [];
  /** What the shared wildcard socket hands this listener's connections to. */
  private readonly accept = (s: Socket): void => this.onConnection(s);
  /** Called when the last open connection of a draining listener closes. */
  private drained: (() => void) | null = null;

  constructor(
    readonly ip: string, readonly port: number, private readonly clock: Clock, private readonly log: Logger, private readonly limits: ConnLimits,
    private readonly shared: SharedAdmission | null = null, private readonly ports: WildcardPorts | null = null,
  ) {
    if (ports !== null) {
      this.server = null;
      return;
    }
    this.server = createServer({ allowHalfOpen: true, noDelay: true }, (s) => this.onConnection(s));
    this.server.on('error', (e) => this.log.error({ err: e, ip, port }, 'listener error'));
  }

  get key(): string {
    return `${this.ip}:${this.port}`;
  }

  listen(): Promise<void> {
    const server = this.server;
    if (server === null) return this.ports!.attach(this.ip, this.port, this.accept);
    return new Promise((resolve, reject) => {
      const onErr = (e: Error) => reject(e);
      server.once('error', onErr);
      // A worker shares the socket the primary holds for every worker (docs/dataplane.md, "Workers").
      server.listen({ host: this.ip, port: this.port, backlog: 4096, exclusive: !cluster.isWorker }, () => {
        server.removeListener('error', onErr);
        resolve();
      });
    });
  }

  private onConnection(sock: Socket): void {
    const rt = this.rt;
    if (rt === null || this.draining) {
      if (this.early !== null && !this.draining && this.early.length < EARLY_MAX) {
        sock.on('error', ignore);
        this.early.push(sock);
      } else {
        sock.destroy();
      }
      return;
    }
    // Stickiness sees the address, an IPv4 client one however the socket saw it; the caps and the
    // throttle count its client key (an IPv6 client by its /64, lib/client-key.ts).
    const ip = unmapIpv4(sock.remoteAddress ?? '');
    const key = this.limits.key(ip);
    const gate = rt.throttle;
    // Workers ask the primary only when they must: a throttled NodeBalancer, or a client that
    // `table` stickiness has not pinned in this process yet.
    const shared = this.shared;
    const ask = shared !== null && (gate.limit > 0 || !rt.pinned(ip));
    if (!this.limits.admit(gate, key, !ask)) {
      // Over a cap, the descriptor budget or client_conn_throttle: refused at once, before a
      // byte is read (docs/dataplane.md "Connection limits").
      sock.resetAndDestroy();
      return;
    }
    if (!ask) return this.start(sock, rt, key, gate);
    sock.on('error', ignore);
    shared.admit(rt, ip, key).then((ok) => {
      if (!ok) this.limits.refuse('throttle');
      if (ok && !sock.destroyed && !this.draining) return this.start(sock, rt, key, gate);
      this.limits.release(gate, key);
      sock.resetAndDestroy();
    }, () => {
      this.limits.release(gate, key);
      sock.resetAndDestroy();
    });
  }

  private start(sock: Socket, rt: ConfigRuntime, key: string, gate: ConnThrottle): void {
    this.sockets.add(sock);
    const traffic = rt.traffic;
    traffic.connectionOpened();
    sock.once('close', () => {
      this.limits.release(gate, key);
      this.sockets.delete(sock);
      traffic.connectionClosed();
      if (this.sockets.size === 0) this.drained?.();
    });
    const protocol = rt.spec.protocol;
    if (protocol === 'tcp') {
      new TcpSession(rt, sock, this.limits.tcpIdleTimeoutMs);
    } else if (protocol === 'http') {
      new HttpSession(rt, sock, false);
    } else {
      sock.on('error', () => sock.destroy());
      rt.tls!.emit('connection', sock);
    }
  }

  /** The first swap gave this listener its config: serve the connections that came before it. */
  serve(): void {
    const early = this.early;
    this.early = null;
    if (early !== null) for (const s of early) if (!s.destroyed) this.onConnection(s);
  }

  /** Hooks a runtime's tls.Server so its handshakes become https sessions. */
  static attachTls(rt: ConfigRuntime): void {
    const tls = rt.tls!;
    if (tls.listenerCount('secureConnection') > 0) return;
    tls.on('secureConnection', (s: TLSSocket) => new HttpSession(rt, s, true));
    tls.on('tlsClientError', (_e: Error, s: TLSSocket) => s.destroy());
  }

  /**
   * Stops accepting; open connections get until the deadline to finish, then are cut.
   * Resolves when none are left.
   */
  drain(deadlineMs: number): Promise<void> {
    this.draining = true;
    return new Promise((resolve) => {
      this.stopAccepting();
      if (this.sockets.size === 0) return resolve();
      const deadline = this.clock.setTimeout(() => {
        for (const s of this.sockets) s.destroy();
      }, deadlineMs);
      this.drained = () => {
        this.drained = null;
        deadline.cancel();
        resolve();
      };
    });
  }

  /** Immediate stop (engine close). */
  destroy(): void {
    this.draining = true;
    for (const s of this.early ?? []) s.destroy();
    this.early = null;
    this.stopAccepting();
    for (const s of this.sockets) s.destroy();
  }

  private stopAccepting(): void {
    if (this.server !== null) this.server.close();
    else this.ports!.detach(this.ip, this.port, this.accept);
  }
}
