import cluster from 'node:cluster';
import { createServer, type Server, type Socket } from 'node:net';
import { unmapIpv4 } from '../../lib/ipv4.js';
import { formatIpv6, parseIpv6 } from '../../lib/ipv6.js';
import type { Logger } from '../../lib/logger.js';

type Accept = (sock: Socket) => void;

interface Port {
  server: Server;
  /** The listener of each served address on this port, by address. */
  byIp: Map<string, Accept>;
  ready: Promise<void>;
}

/** One spelling per address, so the address a connection reached finds its listener. */
function canonical(ip: string): string {
  const bare = unmapIpv4(ip);
  if (!bare.includes(':')) return bare;
  const n = parseIpv6(bare);
  return n === undefined ? bare : formatIpv6(n);
}

/**
 * One listening socket per port (and address family) on the wildcard address, shared by every
 * NodeBalancer address served on that port. A connection goes to the listener of the address it
 * reached (the accepted socket's local address), as Envoy picks a filter chain by destination
 * address; one that reached an address nothing serves on that port is reset at once, as a
 * closed port would be. Only for a data plane that owns its ports on every address of the host:
 * Linux refuses a wildcard bind on a port another socket listens on, and the other way round
 * (docs/dataplane.md, "Wildcard listeners"). Under node:cluster every worker shares the one
 * socket per port, as with per-address sockets.
 */
export class WildcardPorts {
  private readonly ports = new Map<string, Port>();

  constructor(private readonly log: Logger) {}

  /** Serves `ip:port` through the port's shared socket, binding it first when it is the first address. */
  attach(ip: string, port: number, accept: Accept): Promise<void> {
    const v6 = ip.includes(':');
    const key = `${v6 ? 6 : 4}/${port}`;
    let p = this.ports.get(key);
    if (p === undefined) p = this.open(key, v6, port);
    p.byIp.set(canonical(ip), accept);
    return p.ready;
  }

  /** Stops serving `ip:port` through `accept`; the port's socket closes with its last address. */
  detach(ip: string, port: number, accept: Accept): void {
    const key = `${ip.includes(':') ? 6 : 4}/${port}`;
    const p = this.ports.get(key);
    const at = canonical(ip);
    // A later listener of the same address (a removed NodeBalancer's address reused) stays.
    if (p === undefined || p.byIp.get(at) !== accept) return;
    p.byIp.delete(at);
    if (p.byIp.size > 0) return;
    this.ports.delete(key);
    p.server.close();
  }

  /** Shared sockets held (one per port and family). */
  get size(): number {
    return this.ports.size;
  }

  private open(key: string, v6: boolean, port: number): Port {
    const byIp = new Map<string, Accept>();
    const server = createServer({ allowHalfOpen: true, noDelay: true }, (sock) => {
      const accept = byIp.get(canonical(sock.localAddress ?? ''));
      if (accept) accept(sock);
      else sock.resetAndDestroy();
    });
    server.on('error', (err) => this.log.error({ err, port }, 'wildcard listener error'));
    const ready = new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      // A worker shares the socket the primary holds for every worker (docs/dataplane.md, "Workers").
      server.listen({ host: v6 ? '::' : '0.0.0.0', port, ipv6Only: v6, backlog: 4096, exclusive: !cluster.isWorker }, () => {
        server.removeListener('error', reject);
        resolve();
      });
    });
    const p: Port = { server, byIp, ready };
    this.ports.set(key, p);
    // A failed bind leaves nothing behind: the next snapshot naming the port tries again.
    ready.catch(() => {
      if (this.ports.get(key) === p) this.ports.delete(key);
      server.close();
    });
    return p;
  }
}
