import { connect, type Socket } from 'node:net';
import type { NodeState, Pooled } from '../runtime/node-state.js';
import { IdleTicker } from './idle-ticker.js';

/** A pooled connection idle for longer than this is not reused (below common backend keep-alive timeouts). */
export const POOL_IDLE_MS = 15_000;
/**
 * A request that cannot be replayed if a reused connection fails (not idempotent, or its body
 * streamed) reuses only a connection idle for less than this; otherwise it gets a new one. The
 * backend closing an idle connection just as we write is then as unlikely as it can be made
 * (backend idle timeouts are seconds: nginx 75 s, Node 5 s, Apache 5 s) without giving up reuse
 * under load, where connections are idle for milliseconds.
 */
export const UNSAFE_REUSE_IDLE_MS = 1_000;
/** Connect timeout for a new backend connection. */
export const CONNECT_TIMEOUT_MS = 5_000;
/**
 * Inactivity limit once connected: how long a backend may take to start answering or stay silent
 * mid-response, and how long an idle pooled connection lingers before it is closed. One value for
 * the connection's life, checked by a coarse timer (idle-ticker.ts: 60 to 75 s).
 */
const SERVER_TIMEOUT_MS = 60_000;
/** At most this many idle connections are kept per node. */
const POOL_MAX_IDLE = 256;
/** Size of a connection's read buffer (one per connection, reused from read to read). */
export const READ_BUFFER = 32 * 1024;
/** Read buffers of closed connections kept for new ones (at most 16 MiB). */
const SPARE_MAX = 512;
const spare: Buffer[] = [];

/**
 * A read buffer for a new connection: a closed connection's when there is one. Short-lived
 * connections (a client that sends `Connection: close`) then allocate nothing per request.
 */
function takeReadBuffer(): Buffer {
  return spare.pop() ?? Buffer.allocUnsafeSlow(READ_BUFFER);
}

/** What a backend connection reports to the HTTP session that currently owns it. */
export interface BackendOwner {
  onBackendConnect(conn: BackendConn): void;
  /** `chunk` is a view of the connection's reused read buffer: valid only during the call. */
  onBackendData(conn: BackendConn, chunk: Buffer): void;
  /**
   * After onBackendData: may bytes of that chunk still be referenced (a client write not yet
   * flushed, a partial head kept)? Then the next read goes into a fresh buffer.
   */
  keepsBackendBytes(): boolean;
  /**
   * True when the owner's client is a TLS socket. Its writes complete asynchronously, so the
   * reused buffer would be swapped on nearly every read; a copy of just the bytes read is
   * cheaper, and the read buffer then stays free.
   */
  readonly copiesBackendBytes: boolean;
  onBackendEnd(conn: BackendConn): void;
  onBackendClose(conn: BackendConn, error: Error | null): void;
  onBackendDrain(): void;
  onBackendTimeout(conn: BackendConn): void;
}

/**
 * One keep-alive connection to a node, owned by at most one HTTP session at a time and parked in
 * the node's idle pool between requests. Socket handlers are bound once per connection and
 * dispatch to the current owner, so a request costs no new closures.
 */
export class BackendConn implements Pooled {
  readonly socket: Socket;
  owner: BackendOwner | null;
  connected = false;
  /** True once it has carried a complete exchange (a failure on it may be a keep-alive race). */
  reused = false;
  private dead = false;
  private idleSince = 0;
  private rbuf = takeReadBuffer();
  /** The inactivity timer once connected. */
  private idle: IdleTicker | null = null;

  constructor(readonly node: NodeState, owner: BackendOwner) {
    this.owner = owner;
    // Reads land in one buffer per connection instead of a new 64 KiB allocation per read
    // (allocation churn and the GC work it causes were the largest user-space cost).
    const s = connect({
      host: node.spec.host, port: node.spec.port, noDelay: true,
      onread: { buffer: () => this.rbuf, callback: this.onRead },
    });
    this.socket = s;
    s.on('connect', this.onConnect);
    s.on('end', this.onEnd);
    s.on('error', this.onError);
    s.on('close', this.onClose);
    s.on('drain', this.onDrain);
    s.on('timeout', this.onTimeout);
    s.setTimeout(CONNECT_TIMEOUT_MS);
  }

  private readonly onConnect = (): void => {
    this.connected = true;
    // The connect timeout (a socket timer) ends here; from now on the coarse one.
    this.socket.setTimeout(0);
    this.idle = new IdleTicker(this.socket, SERVER_TIMEOUT_MS, this.onTimeout);
    this.owner?.onBackendConnect(this);
  };

  /** From now on the connection may be idle for `ms` (an upgraded tunnel). */
  idleFor(ms: number): void {
    this.idle?.idleFor(ms);
  }

  private readonly onRead = (n: number, buf: Buffer): boolean => {
    const owner = this.owner;
    if (owner === null) {
      this.destroy(); // bytes while idle: the peer is not speaking HTTP to us any more
      return false;
    }
    if (owner.copiesBackendBytes) {
      owner.onBackendData(this, Buffer.from(buf.subarray(0, n)));
      return true;
    }
    owner.onBackendData(this, n === buf.length ? buf : buf.subarray(0, n));
    // Asked of the owner that got the bytes, even if it has released this connection since.
    if (owner.keepsBackendBytes()) this.rbuf = takeReadBuffer();
    return true;
  };

  private readonly onEnd = (): void => {
    if (this.owner !== null) this.owner.onBackendEnd(this);
    else this.destroy();
  };

  private lastError: Error | null = null;
  private readonly onError = (err: Error): void => {
    this.lastError = err;
  };

  private readonly onClose = (): void => {
    // No more reads, and the current buffer holds nothing anyone kept (a kept one was swapped
    // out right after the read), so the next connection may have it.
    if (spare.length < SPARE_MAX) spare.push(this.rbuf);
    this.idle?.stop();
    this.dead = true;
    this.unpool();
    const o = this.owner;
    this.owner = null;
    o?.onBackendClose(this, this.lastError);
  };

  private readonly onDrain = (): void => {
    this.owner?.onBackendDrain();
  };

  private readonly onTimeout = (): void => {
    if (this.owner !== null) this.owner.onBackendTimeout(this);
    else this.destroy();
  };

  get alive(): boolean {
    return !this.dead && !this.socket.destroyed;
  }

  /** Back to the node's idle pool, or closed when the pool cannot take it. */
  release(): void {
    this.owner = null;
    this.reused = true;
    const node = this.node;
    if (!this.alive || node.retired || node.status === 'DOWN' || node.idle.length >= POOL_MAX_IDLE) {
      this.destroy();
      return;
    }
    // Wall time, not the injected clock: the age is compared with the backend's own keep-alive
    // timeout, which runs in real time whatever a test clock says.
    this.idleSince = Date.now();
    if (this.socket.isPaused()) this.socket.resume();
    node.idle.push(this);
  }

  /**
   * Takes a live idle connection from `node`'s pool that has been idle for less than `maxIdleMs`,
   * or null. The pool is a stack: the last released (least idle) is tried first, so when it is
   * too old for `maxIdleMs` every other is too, and they stay for requests that accept them.
   */
  static take(node: NodeState, owner: BackendOwner, maxIdleMs = POOL_IDLE_MS): BackendConn | null {
    const idle = node.idle as BackendConn[];
    const now = Date.now();
    while (idle.length > 0) {
      const c = idle[idle.length - 1];
      const age = now - c.idleSince;
      if (!c.alive || age >= POOL_IDLE_MS) {
        idle.pop();
        c.destroy();
        continue;
      }
      if (age >= maxIdleMs) return null;
      idle.pop();
      c.owner = owner;
      return c;
    }
    return null;
  }

  private unpool(): void {
    const idle = this.node.idle as BackendConn[];
    const i = idle.indexOf(this);
    if (i >= 0) idle.splice(i, 1);
  }

  destroy(): void {
    this.owner = null;
    this.unpool();
    this.socket.destroy();
  }
}
