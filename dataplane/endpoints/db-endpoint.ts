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
  /** How long a client is dialled again while no member has served it (see DbEndpoint.forward). */
  memberWaitMs: 3_000,
  /** The pause after every target of the spec failed a client once. */
  retryPauseMs: 100,
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
  /** The member has spoken to the client: the session is its from now on. */
  served: boolean;
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
      if (!this.allowed(e.source)) this.cut(e);
      // A client whose member has not spoken yet is dialled again, to the new targets.
      else if (!keep.has(targetKey(e.target))) {
        if (e.served) this.cut(e);
        else e.upstream?.destroy();
      }
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

  /**
   * Proxies an admitted client to a target of the current spec. Until the member has spoken to
   * the client (a MySQL server speaks first: its handshake) and while none of the client's bytes
   * went to a member, the client is not lost when the member fails it: it is dialled again, to
   * the next target of the newest spec, for up to `memberWaitMs`. That covers a member that is
   * restarting (refused, accepted then closed, or its refusal packet), and a snapshot that names
   * the member serving now arriving a moment after the client (docs/databases.md, "What the data
   * plane does with a connection").
   */
  private forward(client: Socket, source: string): void {
    this.stats.accepted++;
    this.stats.open++;
    client.once('close', () => this.stats.open--);
    // Everything proxied passes through the client socket, so its idle timer covers both ways.
    // Real time: the client and the server measure idleness in real time too.
    if (this.limits.idleTimeoutMs > 0) {
      client.setTimeout(this.limits.idleTimeoutMs);
      client.once('timeout', () => client.destroy());
    }
    const entry: Live = { client, upstream: undefined as unknown as Socket, target: this.spec.targets[0]!, source, served: false };
    this.live.add(entry);
    client.setNoDelay(true);
    const done = () => {
      this.live.delete(entry);
      client.destroy();
      entry.upstream?.destroy();
    };
    client.on('error', done);
    client.on('close', done);
    // Real time: the wait is for a server to start or a snapshot to arrive, on no clock of ours.
    const deadline = Date.now() + this.limits.memberWaitMs;
    const first = this.rr++;
    let attempt = 0;
    /** The client's bytes went to a member (a dial that never connected consumed none). */
    let consumed = false;
    /** The ERR packet of the last member that refused the client before its handshake. */
    let refusal: Buffer | undefined;
    const mayRetry = () => !entry.served && !consumed && this.live.has(entry) && !client.destroyed && Date.now() < deadline;
    // The wait is over: the client gets the last refusal as the member sent it, else is closed.
    const giveUp = () => {
      if (!refusal || entry.served || consumed || client.destroyed) return done();
      this.live.delete(entry);
      client.end(refusal);
    };
    const again = () => {
      if (!mayRetry()) return giveUp();
      // A whole round of targets failed: give the member (or the snapshot) a moment.
      const n = this.spec.targets.length;
      const pause = n === 0 || attempt % n === 0 ? this.limits.retryPauseMs : 0;
      if (pause === 0) return dial();
      setTimeout(() => (mayRetry() ? dial() : giveUp()), pause).unref();
    };
    const dial = (): void => {
      const spec = this.spec;
      const n = spec.targets.length;
      if (n === 0) {
        attempt = 0;
        return again();
      }
      const target = spec.targets[(first + attempt++) % n]!;
      const upstream = connect({ host: target.host, port: target.port, localAddress: this.sourceAddress, noDelay: true });
      entry.upstream = upstream;
      entry.target = target;
      let detach: (() => void) | undefined;
      // A member whose host is gone would hold the client for the kernel's SYN timeout (minutes).
      upstream.setTimeout(this.limits.connectTimeoutMs, () => upstream.destroy(new Error('connect timeout')));
      upstream.once('connect', () => {
        upstream.setTimeout(0);
        upstream.write(proxyV1({ srcIp: source, srcPort: client.remotePort ?? 0, dstIp: spec.address, dstPort: spec.port }));
        if (spec.requireTls) detach = requireTlsGate(client, upstream);
        else {
          client.pipe(upstream);
          detach = () => client.unpipe(upstream);
        }
        upstream.once('data', (chunk: Buffer) => {
          // The member refused before the handshake (shutting down, the PROXY header not
          // accepted yet, too many connections): another attempt may be served. The last one's
          // refusal reaches the client as the server sent it.
          if (isErrorPacket(chunk) && client.bytesRead === 0 && mayRetry()) {
            refusal = chunk;
            return void upstream.destroy();
          }
          entry.served = true;
          client.write(chunk);
          upstream.pipe(client);
        });
      });
      upstream.on('error', (err) => {
        this.stats.upstreamErrors++;
        this.log.debug({ err, endpoint: spec.listenKey, target: targetKey(target) }, 'member connection failed');
      });
      upstream.on('close', () => {
        if (entry.upstream !== upstream) return;
        detach?.();
        if (detach && client.bytesRead > 0) consumed = true;
        client.pause();
        again();
      });
    };
    dial();
  }
}

/** An ERR packet (0xff) as the first packet a member sends: it refused the connection. */
function isErrorPacket(chunk: Buffer): boolean {
  return chunk.length >= 5 && chunk[4] === 0xff;
}

/** CLIENT_SSL in the capability flags of a MySQL/MariaDB handshake response. */
const CLIENT_SSL = 0x800;

/**
 * ssl_connection at the endpoint, in front of the server's own require_secure_transport: the
 * client's first packet (the handshake response, or the SSL request that precedes TLS) must
 * carry CLIENT_SSL. A client that does not is answered with the server's own error for it and
 * disconnected; nothing it sent reaches the member. Returns what takes the gate (or the pipe it
 * became) off the client.
 */
function requireTlsGate(client: Socket, upstream: Socket): () => void {
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
  // A client paused after an earlier attempt: a 'data' listener alone does not restart it.
  client.resume();
  return () => {
    client.off('data', onData);
    client.unpipe(upstream);
  };
}
