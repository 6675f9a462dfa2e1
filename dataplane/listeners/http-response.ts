import type { Socket } from 'node:net';
import { isFailureStatus } from '../health/passive.js';
import type { NodeState } from '../runtime/node-state.js';
import type { SessionConfig } from '../runtime/session-config.js';
import type { BackendConn } from './backend-conn.js';
import { R502, type CannedResponse } from './canned-responses.js';
import { ChunkedTracker, CHUNK_ERROR } from './chunked.js';
import { BAD, HeadInfo, NEED_MORE, parseResponseHead } from './http-head.js';
import { CONN_AS_RECEIVED, CONN_CLOSE, CONN_KEEP, CONN_KEEP_ALIVE, responseHead, type ConnRewrite } from './http-rewrite.js';
import type { IdleTicker } from './idle-ticker.js';

/** Idle limit on an upgraded (WebSocket) tunnel. */
const TUNNEL_IDLE_MS = 3_600_000;
/** Interim (1xx) responses passed on per request; a backend flooding them gets a 502. */
const MAX_INTERIM = 32;

// Session states
export const S_HEAD = 0; // waiting for a request head
export const S_BODY = 1; // forwarding a request body
export const S_WAIT = 2; // request sent, response in flight
export const S_TUNNEL = 3; // upgraded: raw bytes both ways
export const S_CLOSED = 4;
// Response states
const R_HEAD = 0;
const R_LENGTH = 1;
const R_CHUNKED = 2;
export const R_EOF = 3;
export const R_DONE = 4;

/**
 * The backend-to-client half of an http/https session (listeners/http-session.ts): response
 * heads parsed and passed on (interim ones too), bodies framed by Content-Length, chunked coding
 * or close, and the switch to a raw tunnel on 101. The state both halves share lives here; the
 * session decides what happens when a response completes or fails (finish, reply).
 */
export abstract class HttpResponseRelay {
  protected state = S_HEAD;
  /** Client bytes not yet forwarded (a partial head, pipelined requests, early body bytes). */
  protected buf: Buffer | null = null;
  protected readonly req = new HeadInfo();
  protected readonly res = new HeadInfo();
  private readonly resChunks = new ChunkedTracker();
  protected conn: BackendConn | null = null;
  protected node: NodeState | null = null;
  /** What went to the backend in the first write (head and body start), kept for a retry. */
  protected out: Buffer | null = null;
  protected replayable = false;
  protected rstate = R_HEAD;
  private resRemaining = 0;
  private resBuf: Buffer | null = null;
  protected gotResponse = false;
  private interim = 0;
  /** Start of a parsed response head not yet written to the client (-1: none). */
  protected headFrom = -1;
  /** A rewritten response head not yet written to the client (goes out with the body start). */
  private headOut: Buffer | null = null;
  protected keepClient = true;
  /** The response must carry an NB_SRVID cookie (http_cookie stickiness chose a new node). */
  protected setCookie = false;
  protected clientEnded = false;

  constructor(protected readonly rt: SessionConfig, protected readonly client: Socket) {}

  /** The response is complete: keep or release the backend, then the next request or close. */
  protected abstract finish(): void;
  protected abstract finishWithoutConn(): void;
  /** A response of our own, then close. */
  protected abstract reply(response: CannedResponse): void;
  /** The client's coarse idle timer (idle-ticker.ts). */
  protected abstract readonly idle: IdleTicker;

  /** The exchange with the current node is over (leastconn's in-flight count). */
  protected releaseNode(): void {
    if (this.node !== null) {
      this.rt.closed(this.node);
      this.node = null;
    }
  }

  /** A new request is on its way: nothing of its response has been seen yet. */
  protected expectResponse(): void {
    this.rstate = R_HEAD;
    this.gotResponse = false;
    this.interim = 0;
    this.resBuf = null;
    this.headOut = null;
  }

  onBackendData(conn: BackendConn, chunk: Buffer): void {
    if (conn !== this.conn || this.state === S_CLOSED) return;
    this.gotResponse = true;
    this.rt.traffic.sent(chunk.length);
    if (this.state === S_TUNNEL) {
      if (!this.client.write(chunk)) conn.socket.pause();
      return;
    }
    let from = 0;
    if (this.rstate === R_HEAD) {
      const b = this.resBuf === null ? chunk : Buffer.concat([this.resBuf, chunk]);
      this.resBuf = null;
      from = this.responseHead(conn, b);
      if (from < 0) return;
      chunk = b;
    }
    // The head (when not already written) goes out in the same write as the body bytes.
    this.responseBody(conn, chunk, from, this.headFrom >= 0 ? this.headFrom : from);
    this.headFrom = -1;
  }

  keepsBackendBytes(): boolean {
    return this.resBuf !== null || this.client.writableLength > 0;
  }

  /** The backend broke the exchange before anything final reached the client: 502. */
  private badResponse(conn: BackendConn, reason: string | null): void {
    if (reason !== null) this.rt.failed(conn.node, reason);
    this.conn = null;
    conn.destroy();
    this.reply(R502);
  }

  /** Handles response heads at the start of `b`; returns where the body starts, or -1. */
  private responseHead(conn: BackendConn, b: Buffer): number {
    const res = this.res;
    let at = 0;
    for (;;) {
      const view = at === 0 ? b : b.subarray(at);
      const n = parseResponseHead(view, res);
      if (n === NEED_MORE) {
        this.resBuf = view;
        return -1;
      }
      if (n === BAD) {
        this.badResponse(conn, `bad response: ${res.error}`);
        return -1;
      }
      const status = res.status;
      if (status >= 100 && status < 200 && status !== 101) {
        if (++this.interim > MAX_INTERIM) {
          // Nothing final was sent yet, so the client can still be told (after the 1xx heads).
          this.badResponse(conn, 'too many interim responses');
          return -1;
        }
        // Interim (100 Continue): pass on and wait for the final head.
        this.client.write(view.subarray(0, n));
        at += n;
        if (at === b.length) return -1;
        continue;
      }
      this.rt.traffic.response(status);
      if (isFailureStatus(status)) this.rt.failed(conn.node, `status ${status}`);
      else this.rt.seen(conn.node);
      if (status === 101) {
        if (!this.req.upgrade) {
          this.badResponse(conn, null);
          return -1;
        }
        this.startTunnel(conn, view, n);
        return -1;
      }
      this.frameResponse(status);
      this.out = null;
      this.replayable = false;
      const cookie = this.setCookie && this.node !== null ? this.node.cookie : null;
      const connLines = this.connRewrite();
      if (cookie !== null || res.drop.length > 0 || connLines !== CONN_AS_RECEIVED) {
        // A rewritten head goes out with the body bytes of this read, in one write.
        this.headOut = responseHead(view, res, n, cookie, connLines);
        this.headFrom = -1;
      } else {
        this.headFrom = at;
      }
      return at + n;
    }
  }

  /** Response framing (RFC 9112 §6.3), and whether the client connection can carry on after. */
  private frameResponse(status: number): void {
    const res = this.res;
    if (this.req.isHead || status === 204 || status === 304) {
      this.rstate = R_DONE;
    } else if (res.chunked) {
      this.rstate = R_CHUNKED;
      this.resChunks.reset();
    } else if (res.otherEncoding || res.contentLength < 0) {
      this.rstate = R_EOF;
    } else {
      this.rstate = res.contentLength === 0 ? R_DONE : R_LENGTH;
      this.resRemaining = res.contentLength;
    }
    // The backend's own close (`Connection: close`, HTTP/1.0 without keep-alive) ends only the
    // backend connection (finish): the client keeps its connection (connRewrite).
    if (this.rstate === R_EOF || this.rt.draining) this.keepClient = false;
  }

  /**
   * How the response's Connection lines change so that they tell the client what we do with its
   * connection, which is decided apart from the backend's (Connection is hop-by-hop).
   */
  private connRewrite(): ConnRewrite {
    const res = this.res;
    if (!this.keepClient) {
      // The client's close was not passed on (http-head.ts), or this worker is draining and tells
      // keep-alive clients to reconnect to the workers that replace it: say it in the response
      // ourselves, or a client seeing the backend's keep-alive would reuse a connection we close.
      return (this.req.closeStripped || this.rt.draining) && !res.connClose ? CONN_CLOSE : CONN_AS_RECEIVED;
    }
    // The backend ends its connection after this response (nginx's keepalive_requests-th
    // response, an HTTP/1.0 server): the client must not take that as its own close, or every
    // recycled backend connection would cost a client a reconnect.
    if (!res.connClose && (res.version11 || res.connKeepAlive)) return CONN_AS_RECEIVED;
    return res.version11 && this.req.version11 ? CONN_KEEP : CONN_KEEP_ALIVE;
  }

  /** 101 to an Upgrade request: from here raw bytes both ways. */
  private startTunnel(conn: BackendConn, view: Buffer, n: number): void {
    this.client.write(view.subarray(0, n));
    this.state = S_TUNNEL;
    this.replayable = false;
    this.out = null;
    this.idle.idleFor(TUNNEL_IDLE_MS);
    conn.idleFor(TUNNEL_IDLE_MS);
    if (this.buf !== null) {
      conn.socket.write(this.buf);
      this.buf = null;
    }
    this.client.resume();
    if (this.clientEnded) conn.socket.end();
    if (n < view.length) this.client.write(view.subarray(n));
  }

  private responseBody(conn: BackendConn, chunk: Buffer, from: number, writeFrom: number): void {
    let end = chunk.length;
    switch (this.rstate) {
      case R_LENGTH:
        end = Math.min(chunk.length, from + this.resRemaining);
        this.resRemaining -= end - from;
        if (this.resRemaining === 0) this.rstate = R_DONE;
        break;
      case R_CHUNKED: {
        const e = this.resChunks.feed(chunk, from);
        if (e === CHUNK_ERROR) {
          this.rt.failed(conn.node, 'bad chunked response');
          // Head not written yet: the client can still get a clean 502 instead of a cut.
          if (this.headFrom >= 0 || this.headOut !== null) {
            this.headOut = null;
            return this.reply(R502);
          }
          this.conn = null;
          conn.destroy();
          this.client.destroy();
          return;
        }
        if (e >= 0) {
          end = e;
          this.rstate = R_DONE;
        }
        break;
      }
      case R_DONE:
        end = from;
        break;
    }
    const head = this.headOut;
    if (head !== null) {
      this.headOut = null;
      if (!this.client.write(end > writeFrom ? Buffer.concat([head, chunk.subarray(writeFrom, end)]) : head)) conn.socket.pause();
    } else if (end > writeFrom && !this.client.write(writeFrom === 0 && end === chunk.length ? chunk : chunk.subarray(writeFrom, end))) {
      conn.socket.pause();
    }
    if (end < chunk.length) {
      // Bytes after the end of the response: the backend broke framing; do not reuse it.
      this.conn = null;
      conn.destroy();
      if (this.rstate === R_DONE) {
        this.keepClient = false;
        this.finishWithoutConn();
      }
      return;
    }
    if (this.rstate === R_DONE) this.finish();
  }
}
