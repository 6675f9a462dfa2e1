import cluster from 'node:cluster';
import { createServer, connect, type Server, type Socket } from 'node:net';
import { compileAllowList } from '../../lib/allow-list.js';
import { clientKey, DEFAULT_CLIENT_IPV6_PREFIX } from '../../lib/client-key.js';
import { ConcurrencyCap } from '../../lib/conn-cap.js';
import { unmapIpv4 } from '../../lib/ipv4.js';
import type { Logger } from '../../lib/logger.js';
import { proxyV1 } from '../../lib/proxy-protocol.js';
import type { DbEndpointSpec, EndpointTargetSpec } from '../config/endpoint-model.js';

/**
 * Accept-side limits of one database endpoint (docs/databases.md, "Database endpoints";
 * docs/security/traffic.md). One client address needs no more connections than the server
 * accepts (max_connections=200), and twice that in all leaves room for the ones the server is
 * about to refuse. An hour without a byte either way ends a session: abandoned clients do not
 * hold descriptors for the server's 8 h wait_timeout, while pools that recycle connections
 * within 30 minutes never meet it. A client that arrives while no primary is known waits up to
 * 3 s for one (the moment between a failover, or a database turning active, and the snapshot
 * that names the new primary), then is reset.
 */
export const DB_ENDPOINT_LIMITS = {
  perClient: 200, total: 400, idleTimeoutMs: 3_600_000, connectTimeoutMs: 5_000, primaryWaitMs: 3_000,
  /** `perClient` counts a client key (lib/client-key.ts): an IPv6 client by this prefix. */
  clientIpv6Prefix: DEFAULT_CLIENT_IPV6_PREFIX,
};

export type DbEndpointLimits = typeof DB_ENDPOINT_LIMITS;

export type DbEndpointRefusal = 'allow_list' | 'no_primary' | 'client_cap' | 'total_cap';

/** Counters of one endpoint, read by the metrics at scrape time. */
export interface DbEndpointStats {
  accepted: number;
  open: number;
  upstreamErrors: number;
  refused: Record<DbEndpointRefusal, number>;
}

interface Live {
  client: Socket;
  upstream: Socket;
  target: EndpointTargetSpec;
  source: string;
}

const targetKey = (t: EndpointTargetSpec) => `${t.host}:${t.port}`;

/**
 * One database endpoint served by the data plane: a TCP listener that admits clients by source
 * address (allow_list) before reading a byte, picks a member (the primary, or the replicas
 * round-robin) and passes bytes through untouched, so TLS stays end to end between client and
 * server. Each member connection starts with a PROXY v1 header carrying the client's address and
 * leaves from the data plane's endpoint source address, the only TCP peer whose header the
 * members accept (docs/security/mysql.md).
 *
 * A new spec applies at once: a narrower allow_list closes the established connections it no
 * longer admits; a new target set closes connections to members no longer in it (after a
 * failover the old primary may be fenced, and clients must reconnect to the new one).
 */
export class DbEndpoint {
  readonly stats: DbEndpointStats = { accepted: 0, open: 0, upstreamErrors: 0, refused: { allow_list: 0, no_primary: 0, client_cap: 0, total_cap: 0 } };
  private readonly server: Server;
  private readonly caps: ConcurrencyCap;
  private readonly live = new Set<Live>();
  /** Admitted clients waiting for a target (see DB_ENDPOINT_LIMITS.primaryWaitMs). */
  private readonly waiting = new Map<Socket, { source: string; timer: NodeJS.Timeout }>();
  private allowed: (address: string) => boolean = () => false;
  private rr = 0;
  private closed = false;

  constructor(
    private spec: DbEndpointSpec,
    private readonly log: Logger,
    private readonly limits: DbEndpointLimits,
    /** Local address member connections leave from (undefined: the kernel's choice). */
    private readonly sourceAddress: string | undefined,
  ) {
    this.caps = new ConcurrencyCap(limits.perClient, limits.total);
    this.server = createServer({ noDelay: true }, (s) => this.onConnection(s));
    this.server.on('error', (err) => this.log.error({ err, endpoint: spec.listenKey }, 'database endpoint listener error'));
    this.update(spec);
  }

  get key(): string {
    return this.spec.listenKey;
  }

  get current(): DbEndpointSpec {
    return this.spec;
  }

  listen(): Promise<void> {
    return new Promise((resolve, reject) => {
      this.server.once('error', reject);
      this.server.listen({ host: this.spec.address, port: this.spec.port, backlog: 1024, exclusive: !cluster.isWorker }, () => {
        this.server.off('error', reject);
        resolve();
      });
    });
  }

  /** Stops accepting; open connections go on until close() (a draining worker). */
  stopAccepting(): void {
    this.server.close();
  }

  /** Applies a new spec for the same address and port (allow list, TLS rule, targets). */
  update(next: DbEndpointSpec): void {
    const prev = this.spec;
    this.spec = next;
    this.allowed = compileAllowList([...next.allowList]);
    const keep = new Set(next.targets.map(targetKey));
    const targetsChanged = prev.targets.map(targetKey).join(',') !== next.targets.map(targetKey).join(',');
    if (targetsChanged) this.log.info({ endpoint: next.listenKey, targets: [...keep] }, 'database endpoint targets changed');
    for (const e of this.live) {
      if (!keep.has(targetKey(e.target)) || !this.allowed(e.source)) this.cut(e);
    }
    for (const [client, w] of this.waiting) {
      if (!this.allowed(w.source)) client.destroy();
      else if (next.targets.length > 0) {
        clearTimeout(w.timer);
        this.waiting.delete(client);
        if (!client.destroyed) this.forward(client, w.source);
      }
    }
  }

  /** Stops accepting and closes every connection. */
  close(): void {
    this.closed = true;
    this.server.close();
    for (const e of this.live) this.cut(e);
    for (const client of this.waiting.keys()) client.destroy();
  }

  private cut(e: Live): void {
    this.live.delete(e);
    e.client.destroy();
    e.upstream.destroy();
  }

  private refuse(client: Socket, reason: DbEndpointRefusal): void {
    this.stats.refused[reason]++;
    // Reset at once, before a byte is read or sent.
    client.resetAndDestroy();
  }

  private onConnection(client: Socket): void {
    client.on('error', () => client.destroy());
    const source = unmapIpv4(client.remoteAddress ?? '');
    if (this.closed) return void client.destroy();
    if (!this.allowed(source)) return this.refuse(client, 'allow_list');
    // The allow_list judges the address itself; the cap counts the client (its /64 for IPv6).
    const key = clientKey(source, this.limits.clientIpv6Prefix);
    const capped = this.caps.admit(key);
    if (capped !== null) return this.refuse(client, capped === 'total' ? 'total_cap' : 'client_cap');
    client.once('close', () => this.caps.release(key));
    if (this.spec.targets.length > 0) return this.forward(client, source);
    if (this.limits.primaryWaitMs <= 0) return this.refuse(client, 'no_primary');
    // Real time: the wait is for a snapshot from the control plane, on no clock of ours.
    const timer = setTimeout(() => {
      this.waiting.delete(client);
      this.refuse(client, 'no_primary');
    }, this.limits.primaryWaitMs);
    this.waiting.set(client, { source, timer });
    client.once('close', () => {
      clearTimeout(timer);
      this.waiting.delete(client);
    });
  }

  /** Proxies an admitted client to a target of the current spec. */
  private forward(client: Socket, source: string): void {
    const spec = this.spec;
    this.stats.accepted++;
    this.stats.open++;
    client.once('close', () => this.stats.open--);
    // Everything proxied passes through the client socket, so its idle timer covers both ways.
    // Real time: the client and the server measure idleness in real time too.
    if (this.limits.idleTimeoutMs > 0) {
      client.setTimeout(this.limits.idleTimeoutMs);
      client.once('timeout', () => client.destroy());
    }
    const n = spec.targets.length;
    const first = this.rr++ % n;
    const entry: Live = { client, upstream: undefined as unknown as Socket, target: spec.targets[first]!, source };
    this.live.add(entry);
    client.setNoDelay(true);
    const done = () => {
      this.live.delete(entry);
      client.destroy();
      entry.upstream.destroy();
    };
    client.on('error', done);
    client.on('close', done);
    // The server speaks first, so nothing of the client's is lost if a member refuses: a client
    // of hosts.secondary tries the next replica (a stopped one refuses at once).
    const dial = (attempt: number): void => {
      const target = spec.targets[(first + attempt) % n]!;
      const upstream = connect({ host: target.host, port: target.port, localAddress: this.sourceAddress, noDelay: true });
      entry.upstream = upstream;
      entry.target = target;
      let connected = false;
      // A member whose host is gone would hold the client for the kernel's SYN timeout (minutes).
      upstream.setTimeout(this.limits.connectTimeoutMs, () => upstream.destroy(new Error('connect timeout')));
      upstream.once('connect', () => {
        connected = true;
        upstream.setTimeout(0);
        upstream.write(proxyV1({ srcIp: source, srcPort: client.remotePort ?? 0, dstIp: spec.address, dstPort: spec.port }));
        if (spec.requireTls) requireTlsGate(client, upstream);
        else client.pipe(upstream);
        upstream.pipe(client);
        upstream.on('close', done);
      });
      upstream.on('error', (err) => {
        this.stats.upstreamErrors++;
        this.log.debug({ err, endpoint: spec.listenKey, target: targetKey(target) }, 'member connection failed');
        if (!connected && attempt + 1 < n && this.live.has(entry)) dial(attempt + 1);
        else done();
      });
    };
    dial(0);
  }
}

/** CLIENT_SSL in the capability flags of a MySQL/MariaDB handshake response. */
const CLIENT_SSL = 0x800;

/**
 * ssl_connection at the endpoint, in front of the server's own require_secure_transport: the
 * client's first packet (the handshake response, or the SSL request that precedes TLS) must
 * carry CLIENT_SSL. A client that does not is answered with the server's own error for it and
 * disconnected; nothing it sent reaches the member.
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
