import type { Socket } from 'node:net';
import { unmapIpv4 } from '../../lib/ipv4.js';
import type { SessionConfig } from '../runtime/session-config.js';
import type { NodeState } from '../runtime/node-state.js';
import { hashString } from '../balancing/picker.js';
import { BackendConn, POOL_IDLE_MS, UNSAFE_REUSE_IDLE_MS, type BackendOwner } from './backend-conn.js';
import { R400, R408, R431, R503, R504, R502, type CannedResponse } from './canned-responses.js';
import { ChunkedTracker, CHUNK_ERROR } from './chunked.js';
import { BAD, MAX_REQUEST_HEAD, NEED_MORE, parseRequestHead } from './http-head.js';
import { HttpResponseRelay, R_DONE, R_EOF, S_BODY, S_CLOSED, S_HEAD, S_TUNNEL, S_WAIT } from './http-response.js';
import { requestHead } from './http-rewrite.js';
import { IdleTicker } from './idle-ticker.js';
import { exclude, idempotent, MAX_ATTEMPTS } from './retry.js';

/** Client idle time allowed while we wait for (the rest of) a request (a coarse timer: to 75 s). */
const CLIENT_IDLE_MS = 60_000;
/**
 * A request head must be complete this long after its first bytes arrived. The idle timer alone
 * never cuts a client that trickles a byte now and then (slowloris).
 */
export const HEAD_TIMEOUT_MS = 30_000;
/** Pipelined bytes buffered while a response is in flight before the client is paused. */
const PIPELINE_BUFFER = 64 * 1024;

/**
 * http/https protocol on raw sockets: parse only the request and response heads, stream bodies
 * (Content-Length or chunked, tracked incrementally), balance every request, and reuse pooled
 * keep-alive backend connections. Requests on one client connection are served in order
 * (pipelined requests wait in the buffer). The head goes out as received plus
 * `X-Forwarded-For` (appended as a new last line) and `X-Forwarded-Proto`; Host is untouched.
 * This file is the client half and the request's life (dispatch, retries, completion); the
 * response half is listeners/http-response.ts.
 */
export class HttpSession extends HttpResponseRelay implements BackendOwner {
  private readonly reqChunks = new ChunkedTracker();
  private readonly ip: string;
  private readonly hash: number;
  private readonly xff: Buffer;
  private tried: Set<NodeState> | null = null;
  private attempts = 0;
  private reqRemaining = 0;
  private reqDone = false;
  /** When the pending incomplete head began (clock ms), 0 when none. */
  private headStart = 0;
  protected readonly idle: IdleTicker;

  readonly copiesBackendBytes: boolean;

  constructor(rt: SessionConfig, client: Socket, tls: boolean) {
    super(rt, client);
    this.copiesBackendBytes = tls;
    this.ip = unmapIpv4(client.remoteAddress ?? '');
    this.hash = hashString(this.ip);
    this.xff = Buffer.from(`X-Forwarded-For: ${this.ip}\r\nX-Forwarded-Proto: ${tls ? 'https' : 'http'}\r\n\r\n`, 'latin1');
    client.setNoDelay(true);
    this.idle = new IdleTicker(client, CLIENT_IDLE_MS, this.onClientIdle);
    client.on('data', this.onClientData);
    client.on('end', this.onClientEnd);
    client.on('error', this.onClientError);
    client.on('close', this.onClientClose);
    client.on('drain', this.onClientDrain);
  }

  // ---- client side ------------------------------------------------------------------------

  private readonly onClientData = (chunk: Buffer): void => {
    this.rt.traffic.received(chunk.length);
    switch (this.state) {
      case S_HEAD:
        this.buf = this.buf === null ? chunk : Buffer.concat([this.buf, chunk]);
        this.nextRequest();
        return;
      case S_BODY:
        this.forwardBody(chunk, 0);
        return;
      case S_WAIT:
        this.buf = this.buf === null ? chunk : Buffer.concat([this.buf, chunk]);
        if (this.buf.length > PIPELINE_BUFFER) this.client.pause();
        return;
      case S_TUNNEL:
        if (this.conn !== null && !this.conn.socket.write(chunk)) this.client.pause();
        return;
    }
  };

  private readonly onClientEnd = (): void => {
    this.clientEnded = true;
    if (this.state === S_TUNNEL) {
      this.conn?.socket.end();
    } else if (this.state === S_HEAD) {
      // Nothing in flight; an incomplete head can never complete now.
      this.state = S_CLOSED;
      this.client.end();
    } else if (this.state === S_BODY && this.conn !== null && this.conn.connected) {
      // The body can never complete: without this the backend would wait for it until its timeout.
      this.client.destroy();
    } else {
      // Answer what was asked, then close.
      this.keepClient = false;
    }
  };

  private readonly onClientError = (): void => {
    this.client.destroy();
  };

  private readonly onClientClose = (): void => {
    this.idle.stop();
    if (this.state === S_CLOSED) return;
    this.state = S_CLOSED;
    this.buf = null;
    const conn = this.conn;
    this.conn = null;
    // A backend connection in the middle of an exchange cannot be reused.
    if (conn !== null) conn.destroy();
    this.releaseNode();
  };

  private readonly onClientDrain = (): void => {
    this.conn?.socket.resume();
  };

  private readonly onClientIdle = (): void => {
    // The idle timer stays armed for the whole connection (re-arming it per request costs);
    // it only cuts a client we are waiting for. A slow backend is the backend timer's business.
    // S_CLOSED: we already answered and ended; a client that never closes its side is cut.
    if (this.state !== S_WAIT) this.client.destroy();
  };

  // ---- requests -----------------------------------------------------------------------------

  private nextRequest(): void {
    const b = this.buf;
    if (b === null || this.state !== S_HEAD) return;
    const req = this.req;
    const n = parseRequestHead(b, req);
    if (n === NEED_MORE) {
      // Only incomplete heads pay for the clock read; a head in one read never gets here.
      const now = this.rt.clock.now();
      if (this.headStart === 0) this.headStart = now;
      else if (now - this.headStart > HEAD_TIMEOUT_MS) this.reply(R408);
      return;
    }
    this.headStart = 0;
    if (n === BAD) {
      this.reply(b.length > MAX_REQUEST_HEAD || req.error.includes('too large') ? R431 : R400);
      return;
    }
    this.keepClient = !this.clientEnded && (req.version11 ? !req.connClose : req.connKeepAlive);
    this.reqDone = false;
    this.expectResponse();
    this.tried = null;
    this.attempts = 0;

    // Framing of the request body, and how much of it is already here.
    let bodyEnd: number;
    if (req.chunked) {
      this.reqChunks.reset();
      const e = this.reqChunks.feed(b, n);
      if (e === CHUNK_ERROR) return this.reply(R400);
      bodyEnd = e < 0 ? b.length : e;
      this.reqDone = e >= 0;
    } else if (req.contentLength > 0) {
      const have = Math.min(b.length - n, req.contentLength);
      bodyEnd = n + have;
      this.reqRemaining = req.contentLength - have;
      this.reqDone = this.reqRemaining === 0;
    } else {
      bodyEnd = n;
      this.reqDone = true;
    }
    // Kept for a replay only when one would be safe: idempotent, and the whole body is here.
    this.replayable = this.reqDone && idempotent(b);
    this.out = requestHead(b, req, n, bodyEnd, this.xff);
    this.buf = bodyEnd < b.length ? b.subarray(bodyEnd) : null;
    this.state = this.reqDone ? S_WAIT : S_BODY;
    this.dispatch();
  }

  /** Picks a node (stickiness first) and sends the request on a pooled or new connection. */
  private dispatch(): void {
    const rt = this.rt;
    const pinned = rt.pinnedBy(this.req.srvid);
    const node = this.attempts < MAX_ATTEMPTS ? rt.choose(this.ip, this.hash, pinned, this.tried) : undefined;
    if (node === undefined) {
      this.reply(R503);
      return;
    }
    this.attempts++;
    // http_cookie: a client not already pinned to this node is told to come back to it.
    this.setCookie = rt.spec.stickiness === 'http_cookie' && pinned !== node;
    this.node = node;
    rt.opened(node);
    // A request that could not be replayed takes only a connection used a moment ago: one idle
    // longer is more likely to be closed by the backend just as we write to it.
    const pooled = BackendConn.take(node, this, this.replayable ? POOL_IDLE_MS : UNSAFE_REUSE_IDLE_MS);
    if (pooled !== null) {
      this.conn = pooled;
      this.send(pooled);
    } else {
      this.conn = new BackendConn(node, this);
      // Nothing more is read from the client until the request has somewhere to go.
      this.client.pause();
    }
  }

  private send(conn: BackendConn): void {
    conn.socket.write(this.out!);
    if (this.state === S_BODY) {
      this.out = null;
      this.client.resume();
      if (this.buf !== null) {
        const b = this.buf;
        this.buf = null;
        this.forwardBody(b, 0);
      } else if (this.clientEnded) {
        // The client ended before its body was complete (see onClientEnd): it never will be.
        this.client.destroy();
      }
    } else if (!this.replayable) {
      this.out = null;
    }
  }

  private forwardBody(chunk: Buffer, from: number): void {
    const conn = this.conn;
    if (conn === null || !conn.connected) {
      this.buf = this.buf === null ? chunk.subarray(from) : Buffer.concat([this.buf, chunk.subarray(from)]);
      return;
    }
    let end: number;
    if (this.req.chunked) {
      const e = this.reqChunks.feed(chunk, from);
      if (e === CHUNK_ERROR) {
        this.client.destroy();
        return;
      }
      end = e < 0 ? chunk.length : e;
      this.reqDone = e >= 0;
    } else {
      end = Math.min(chunk.length, from + this.reqRemaining);
      this.reqRemaining -= end - from;
      this.reqDone = this.reqRemaining === 0;
    }
    const ok = conn.socket.write(from === 0 && end === chunk.length ? chunk : chunk.subarray(from, end));
    if (!ok) this.client.pause();
    if (this.reqDone) {
      this.state = S_WAIT;
      if (end < chunk.length) this.buf = chunk.subarray(end);
      if (this.rstate === R_DONE) this.finish();
    } else if (this.clientEnded) {
      // Body bytes buffered before the backend connected did not complete it, and no more come.
      this.client.destroy();
    }
  }

  // ---- backend side -------------------------------------------------------------------------

  onBackendConnect(conn: BackendConn): void {
    if (conn !== this.conn) return;
    this.client.resume();
    this.send(conn);
  }

  onBackendDrain(): void {
    if (this.state !== S_CLOSED) this.client.resume();
  }

  onBackendTimeout(conn: BackendConn): void {
    if (conn !== this.conn) return;
    if (!conn.connected) return this.retryElsewhere('connect timeout');
    if (!this.gotResponse) {
      this.rt.failed(conn.node, 'response timeout');
      this.conn = null;
      conn.destroy();
      this.reply(R504);
      return;
    }
    // Silent mid-response or idle tunnel: give up on both.
    this.client.destroy();
  }

  onBackendClose(conn: BackendConn, error: Error | null): void {
    if (conn !== this.conn || this.state === S_CLOSED) return;
    this.conn = null;
    if (this.state === S_TUNNEL) {
      this.client.end();
      return;
    }
    if (!conn.connected) {
      this.retryElsewhere(error?.message ?? 'connection closed');
      return;
    }
    if (this.rstate === R_EOF) {
      this.rstate = R_DONE;
      this.keepClient = false;
      this.finish();
      return;
    }
    if (!this.gotResponse) {
      // A pooled connection the backend closed just as we reused it (its idle timeout, a reset):
      // replay once, on a new connection (which is never replayed: conn.reused is false), when
      // the request is idempotent and was held whole (send() kept it only then).
      if (conn.reused && this.replayable && this.out !== null) {
        this.releaseNode();
        this.attempts--;
        this.dispatchTo(conn.node);
        return;
      }
      this.rt.failed(conn.node, error?.message ?? 'closed without a response');
      this.reply(R502);
      return;
    }
    // Cut mid-response: the client cannot get a complete answer.
    this.client.destroy();
  }

  private dispatchTo(node: NodeState): void {
    this.node = node;
    this.rt.opened(node);
    this.attempts++;
    this.conn = new BackendConn(node, this);
    this.client.pause();
  }

  private retryElsewhere(reason: string): void {
    const conn = this.conn;
    const node = this.node;
    this.conn = null;
    conn?.destroy();
    this.releaseNode();
    if (node !== null) {
      this.rt.failed(node, `connect failed: ${reason}`);
      this.tried = exclude(this.tried, node);
    }
    // Nothing was sent yet, so another node can take the request.
    if (this.out === null) return this.reply(R503);
    this.dispatch();
  }

  onBackendEnd(conn: BackendConn): void {
    if (conn !== this.conn) return;
    if (this.state === S_TUNNEL) this.client.end();
    // Otherwise 'close' follows and decides.
  }

  // ---- completion ---------------------------------------------------------------------------

  protected finish(): void {
    if (!this.reqDone) {
      // Answered before the request body was complete: the connection cannot continue.
      this.keepClient = false;
      const conn = this.conn;
      this.conn = null;
      conn?.destroy();
      this.finishWithoutConn();
      return;
    }
    const conn = this.conn;
    this.conn = null;
    if (conn !== null) {
      const res = this.res;
      const req = this.req;
      const reqClose = req.connClose ? !req.closeStripped : !req.version11 && !req.connKeepAlive;
      if (res.connClose || (!res.version11 && !res.connKeepAlive) || reqClose) conn.destroy();
      else conn.release();
    }
    this.finishWithoutConn();
  }

  protected finishWithoutConn(): void {
    this.releaseNode();
    this.out = null;
    if (!this.keepClient) {
      this.state = S_CLOSED;
      this.client.end();
      return;
    }
    this.state = S_HEAD;
    this.client.resume();
    if (this.buf !== null) this.nextRequest();
    else if (this.clientEnded) this.client.end();
  }

  /** A response of our own, then close. */
  protected reply(response: CannedResponse): void {
    const traffic = this.rt.traffic;
    traffic.response(response.status);
    traffic.sent(response.bytes.length);
    const conn = this.conn;
    this.conn = null;
    conn?.destroy();
    this.releaseNode();
    this.state = S_CLOSED;
    this.buf = null;
    this.client.end(response.bytes);
  }
}
