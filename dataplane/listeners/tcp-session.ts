import { connect, type Socket } from 'node:net';
import { unmapIpv4 } from '../../lib/ipv4.js';
import { proxyV1, proxyV2 } from '../../lib/proxy-protocol.js';
import type { SessionConfig } from '../runtime/session-config.js';
import type { NodeState } from '../runtime/node-state.js';
import { hashString } from '../balancing/picker.js';
import { CONNECT_TIMEOUT_MS } from './backend-conn.js';
import { exclude, MAX_ATTEMPTS } from './retry.js';

const READ_BUFFER = 64 * 1024;
const EMPTY = Buffer.alloc(0);

/**
 * tcp protocol: one backend connection per client connection, bytes piped both ways with
 * backpressure, half-close passed on (a client that shuts its write side still gets the rest of
 * the response). The client socket is not read until the backend is connected, so a failed connect
 * can be retried on another node with nothing sent, and a PROXY header is the first write.
 * Once connected, the session has an idle timeout (HAProxy's `timeout client` / `timeout server`):
 * no byte either way, on either side, for `idleMs` closes it (docs/dataplane.md). Chunks only bump
 * a counter; a coarse timer (a quarter of the timeout) notices when it stopped moving, so the
 * per-chunk cost is one increment rather than re-arming a socket timer on every read and write.
 */
export class TcpSession {
  private backend: Socket | null = null;
  private node: NodeState | null = null;
  private tried: Set<NodeState> | null = null;
  private attempts = 0;
  private clientEnded = false;
  private backendEnded = false;
  private closed = false;
  private connected = false;
  private activity = 0;
  private seenActivity = 0;
  private idleTicks = 0;
  private idleTimer: NodeJS.Timeout | null = null;
  private readonly ip: string;
  private readonly hash: number;

  constructor(private readonly rt: SessionConfig, private readonly client: Socket, private readonly idleMs: number) {
    // The same key as http sessions and the throttle: an IPv4 client seen through a dual-stack
    // socket (`::ffff:a.b.c.d`) sticks and hashes as a.b.c.d.
    this.ip = unmapIpv4(client.remoteAddress ?? '');
    this.hash = hashString(this.ip);
    client.setNoDelay(true);
    client.on('error', () => this.close());
    client.on('close', () => this.close());
    this.connectNext();
  }

  private connectNext(): void {
    const rt = this.rt;
    const node = rt.choose(this.ip, this.hash, undefined, this.tried);
    if (node === undefined || this.attempts >= MAX_ATTEMPTS) {
      // Nothing can serve: close, as HAProxy does in tcp mode.
      this.client.destroy();
      return;
    }
    this.attempts++;
    this.node = node;
    rt.opened(node);
    // Backend bytes are read into one buffer per connection (no allocation per read); a chunk
    // is written to the client before the next read may reuse the buffer (see onBackendRead).
    const b = connect({
      host: node.spec.host, port: node.spec.port, allowHalfOpen: true,
      onread: { buffer: Buffer.allocUnsafeSlow(READ_BUFFER), callback: this.onBackendRead },
    });
    this.backend = b;
    b.setNoDelay(true);
    b.setTimeout(CONNECT_TIMEOUT_MS);
    b.once('timeout', this.onConnectTimeout);
    b.once('connect', this.onConnect);
    b.on('error', this.onBackendError);
  }

  private readonly onConnectTimeout = (): void => this.connectFailed('connect timeout');

  private readonly onBackendError = (err: Error): void => {
    if (this.backend !== null && !this.connected) this.connectFailed(err.message);
    else this.close();
  };

  private connectFailed(reason: string): void {
    const node = this.node!;
    const b = this.backend!;
    b.removeAllListeners();
    b.on('error', () => {});
    b.destroy();
    this.rt.closed(node);
    this.backend = null;
    this.node = null;
    if (this.closed) return;
    this.rt.failed(node, `connect failed: ${reason}`);
    this.tried = exclude(this.tried, node);
    this.connectNext();
  }

  private readonly onConnect = (): void => {
    const b = this.backend!;
    const c = this.client;
    this.connected = true;
    if (this.node !== null) this.rt.seen(this.node);
    b.removeListener('timeout', this.onConnectTimeout);
    if (this.closed) return this.close();
    b.setTimeout(0);
    // Real time: the peers measure idleness on their own clocks too (docs/architecture.md, Time).
    if (this.idleMs > 0) this.idleTimer = setInterval(this.onIdleTick, Math.max(1, this.idleMs / 4));
    const pp = this.rt.spec.proxyProtocol;
    if (pp !== 'none') {
      const ends = { srcIp: c.remoteAddress ?? '', srcPort: c.remotePort ?? 0, dstIp: c.localAddress ?? '', dstPort: c.localPort ?? 0 };
      b.write(pp === 'v1' ? proxyV1(ends) : proxyV2(ends));
    }
    const traffic = this.rt.traffic;
    c.on('data', (d: Buffer) => {
      this.activity++;
      traffic.received(d.length);
      if (!b.write(d)) c.pause();
    });
    b.on('drain', () => c.resume());
    c.on('end', () => {
      this.clientEnded = true;
      b.end();
      if (this.backendEnded) this.close();
    });
    b.on('end', () => {
      this.backendEnded = true;
      c.end();
      if (this.clientEnded) this.close();
    });
    b.on('close', () => this.close());
  };

  /** Closes the session after four ticks in a row (idleMs to 1.25 x idleMs) without a chunk. */
  private readonly onIdleTick = (): void => {
    if (this.activity !== this.seenActivity) {
      this.seenActivity = this.activity;
      this.idleTicks = 0;
    } else if (++this.idleTicks >= 4) {
      this.close();
    }
  };

  private readonly onBackendRead = (n: number, buf: Buffer): boolean => {
    this.activity++;
    this.rt.traffic.sent(n);
    const c = this.client;
    c.write(n === buf.length ? buf : buf.subarray(0, n));
    if (c.writableLength === 0) return true;
    // The write did not complete at once and still points into `buf`: stop reading (returning
    // false pauses the socket) until it is flushed, so the next read cannot overwrite it. An
    // empty write queued behind it calls back exactly then (no callback, and no extra tick, on
    // the common path where writes complete at once).
    c.write(EMPTY, this.onClientWritten);
    return false;
  };

  private readonly onClientWritten = (): void => {
    // net.Socket.resume() restarts reading when onread stopped it (a no-op otherwise).
    if (!this.closed && this.backend !== null) this.backend.resume();
  };

  private close(): void {
    if (this.closed) return;
    this.closed = true;
    if (this.idleTimer !== null) clearInterval(this.idleTimer);
    if (this.node !== null) this.rt.closed(this.node);
    this.node = null;
    // Let queued bytes flush on a clean close; destroy when either side errored.
    if (this.backend !== null && !this.backend.destroyed) {
      if (this.backendEnded && this.clientEnded) this.backend.end();
      else this.backend.destroy();
    }
    if (!this.client.destroyed) {
      if (this.backendEnded && this.clientEnded) this.client.end();
      else this.client.destroy();
    }
  }
}
