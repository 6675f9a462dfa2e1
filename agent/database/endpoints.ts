import type { Logger } from '../../lib/logger.js';
import { createFrontProxy, type FrontProxy, type FrontProxyRefusal } from '../endpoints/front-proxy.js';
import { NODE_PORT } from './state.js';

/** Where a database's two endpoints listen, whom they admit and which nodes they lead to. */
export interface EndpointTarget {
  hostPrimary: string;
  hostSecondary: string;
  port: number;
  allowList: string[];
  /** ssl_connection: the proxies refuse clients that do not start TLS (agent/endpoints/front-proxy.ts). */
  requireTls: boolean;
  /** The primary's node address (hosts.primary). */
  primary: string;
  /** The node addresses behind hosts.secondary (the primary itself when no replica serves). */
  secondaries: string[];
}

type Role = 'primary' | 'secondary';

/**
 * The front proxies of one database (docs/agent.md §4): hosts.primary to the primary,
 * hosts.secondary round-robin over the serving replicas. `sync` converges them on a target and
 * remembers it, so the reconcile loop can tell (`isCurrent`) whether anything changed.
 */
export class EndpointSet {
  private readonly proxies = new Map<Role, FrontProxy>();
  private applied = '';

  /**
   * `socketOf` gives a node address's Unix socket, which the proxies dial
   * (agent/endpoints/front-proxy.ts); `onRefused` counts connections the caps turn away.
   */
  constructor(
    private readonly log: Logger,
    private readonly name: string,
    private readonly socketOf: (address: string) => Promise<string | undefined>,
    private readonly onRefused?: (reason: FrontProxyRefusal) => void,
  ) {}

  isCurrent(target: EndpointTarget): boolean {
    return this.applied === targetKey(target);
  }

  async sync(target: EndpointTarget): Promise<void> {
    const hosts = { primary: target.hostPrimary, secondary: target.hostSecondary };
    for (const role of ['primary', 'secondary'] as const) {
      let p = this.proxies.get(role);
      if (p && (p.host !== hosts[role] || p.port !== target.port)) {
        await p.close();
        p = undefined;
      }
      if (!p) {
        p = createFrontProxy({ host: hosts[role], port: target.port || NODE_PORT, logger: this.log, name: `${this.name}-${role}`, onRefused: this.onRefused });
        await p.listen();
        this.proxies.set(role, p);
      }
      p.setAllowList(target.allowList);
      p.setRequireTls(target.requireTls);
      const addrs = role === 'primary' ? [target.primary] : target.secondaries;
      p.setBackends(await Promise.all(addrs.map(async (host) => ({ host, port: NODE_PORT, socketPath: await this.socketOf(host) }))));
    }
    this.applied = targetKey(target);
  }

  /** Closes client connections and refuses new ones until the next `sync` (a restore). */
  pause(): void {
    for (const p of this.proxies.values()) p.setBackends([]);
    this.applied = '';
  }

  async close(): Promise<void> {
    for (const p of this.proxies.values()) await p.close();
    this.proxies.clear();
    this.applied = '';
  }
}

function targetKey(t: EndpointTarget): string {
  return JSON.stringify([t.hostPrimary, t.hostSecondary, t.port, [...t.allowList].sort(), t.requireTls, t.primary, t.secondaries]);
}
