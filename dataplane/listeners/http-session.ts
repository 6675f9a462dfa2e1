import type { Socket } from 'node:net';
import type { ConfigRuntime } from '../runtime/config-runtime.js';
import type { NodeState } from '../runtime/node-state.js';
import { hashString } from '../balancing/picker.js';
import { unmapIpv4 } from '../../lib/ipv4.js';
import { BackendConn, type BackendOwner } from './backend-conn.js';
import { ChunkedTracker, CHUNK_ERROR } from './chunked.js';
import { BAD, HeadInfo, MAX_REQUEST_HEAD, NEED_MORE, parseRequestHead, parseResponseHead } from './http-head.js';

/** Client idle time allowed while we wait for (the rest of) a request. */
export const CLIENT_IDLE_MS = 60_000;
/**
 * A request head must be complete this long after its first bytes arrived. The idle timer alone
 * never cuts a client that trickles a byte now and then (slowloris).
 */
export const HEAD_TIMEOUT_MS = 30_000;
/** Idle limit on an upgraded (WebSocket) tunnel. */
export const TUNNEL_IDLE_MS = 3_600_000;
const MAX_ATTEMPTS = 3;
/** Pipelined bytes buffered while a response is in flight before the client is paused. */
const PIPELINE_BUFFER = 64 * 1024;
/** Interim (1xx) responses passed on per request; a backend flooding them gets a 502. */
const MAX_INTERIM = 32;

// Session states
const S_HEAD = 0; // waiting for a request head
const S_BODY = 1; // forwarding a request body
const S_WAIT = 2; // request sent, response in flight
const S_TUNNEL = 3; // upgraded: raw bytes both ways
const S_CLOSED = 4;
// Response states
const R_HEAD = 0;
const R_LENGTH = 1;
const R_CHUNKED = 2;
const R_EOF = 3;
const R_DONE = 4;

const BODY_503 = '<html><body><h1>503 Service Unavailable</h1>\nNo server is available to handle this request.\n</body></html>\n';

function canned(status: number, reason: string, body: string): Buffer {
  return Buffer.from(`HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/html\r\nContent-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n${body}`, 'latin1');
}
const R503 = canned(503, 'Service Unavailable', BODY_503);
const R502 = canned(502, 'Bad Gateway', '<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response.\n</body></html>\n');
const R504 = canned(504, 'Gateway Timeout', '<html><body><h1>504 Gateway Timeout</h1>\nThe server didn\'t respond in time.\n</body></html>\n');
const R400 = canned(400, 'Bad Request', '<html><body><h1>400 Bad Request</h1>\nYour browser sent an invalid request.\n</body></html>\n');
const R408 = canned(408, 'Request Timeout', '<html><body><h1>408 Request Timeout</h1>\nYour browser didn\'t send a complete request in time.\n</body></html>\n');
const R431 = canned(431, 'Request Header Fields Too Large', '<html><body><h1>431 Request Header Fields Too Large</h1>\n</body></html>\n');

/**
 * http/https protocol on raw sockets: parse only the request and response heads, stream bodies
 * (Content-Length or chunked, tracked incrementally), balance every request, and reuse pooled
 * keep-alive backend connections. Requests on one client connection are served in order
 * (pipelined requests wait in the buffer). The head goes out as received plus
 * `X-Forwarded-For` (appended as a new last line) and `X-Forwarded-Proto`; Host is untouched.
 */
export class HttpSession implements BackendOwner {
  private state = S_HEAD;
  private buf: Buffer | null = null;
  private readonly req = new HeadInfo();
  private readonly res = new HeadInfo();
  private readonly reqChunks = new ChunkedTracker();
  private readonly resChunks = new ChunkedTracker();
  private readonly ip: string;
  private readonly hash: number;
  private readonly xff: Buffer;
  private conn: BackendConn | null = null;
  private node: NodeState | null = null;
  private tried: Set<NodeState> | null = null;
  private attempts = 0;
  /** What went to the backend in the first write (head and body start), kept for a retry. */
  private out: Buffer | null = null;
  private replayable = false;
  private reqRemaining = 0;
  private reqDone = false;
  private rstate = R_HEAD;
  private resRemaining = 0;
  private resBuf: Buffer | null = null;
  private gotResponse = false;
  private interim = 0;
  /** Start of a parsed response head not yet written to the client (-1: none). */
  private headFrom = -1;
  private keepClient = true;
  private setCookie = false;
  private clientEnded = false;
  /** When the pending incomplete head began (clock ms), 0 when none. */
  private headStart = 0;

  readonly copiesBackendBytes: boolean;

  constructor(private readonly rt: ConfigRuntime, private readonly client: Socket, tls: boolean) {
    this.copiesBackendBytes = tls;
    this.ip = unmapIpv4(client.remoteAddress ?? '');
    this.hash = hashString(this.ip);
    this.xff = Buffer.from(`X-Forwarded-For: ${this.ip}\r\nX-Forwarded-Proto: ${tls ? 'https' : 'http'}\r\n\r\n`, 'latin1');
    client.setNoDelay(true);
    client.setTimeout(CLIENT_IDLE_MS);
    client.on('data', this.onClientData);
    client.on('end', this.onClientEnd);
    client.on('error', this.onClientError);
    client.on('close', this.onClientClose);
    client.on('drain', this.onClientDrain);
    client.on('timeout', this.onClientTimeout);
  }

  // ---- client side ------------------------------------------------------------------------

  private readonly onClientData = (chunk: Buffer): void => {
    const rt = this.rt;
    rt.deltaIn += chunk.length;
    rt.totalIn += chunk.length;
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

  private readonly onClientTimeout = (): void => {
    // The idle timer stays armed for the whole connection (re-arming it per request costs);
    // it only cuts a client we are waiting for. A slow backend is the backend timer's business.
    // S_CLOSED: we already answered and ended; a client that never closes its side is cut.
    if (this.state !== S_WAIT) this.client.destroy();
  };

  private releaseNode(): void {
    if (this.node !== null) {
      this.node.active--;
      this.node = null;
    }
  }

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
      else if (now - this.headStart > HEAD_TIMEOUT_MS) this.reply(R408, 4);
      return;
    }
    this.headStart = 0;
    if (n === BAD) {
      this.reply(b.length > MAX_REQUEST_HEAD || req.error.includes('too large') ? R431 : R400, 4);
      return;
    }
    this.keepClient = !this.clientEnded && (req.version11 ? !req.connClose : req.connKeepAlive);
    this.reqDone = false;
    this.rstate = R_HEAD;
    this.gotResponse = false;
    this.interim = 0;
    this.resBuf = null;
    this.tried = null;
    this.attempts = 0;

    // Framing of the request body, and how much of it is already here.
    let bodyEnd: number;
    if (req.chunked) {
      this.reqChunks.reset();
      const e = this.reqChunks.feed(b, n);
      if (e === CHUNK_ERROR) return this.reply(R400, 4);
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
    this.replayable = this.reqDone;
    this.out = this.buildHead(b, n, bodyEnd);
    this.buf = bodyEnd < b.length ? b.subarray(bodyEnd) : null;
    this.state = this.reqDone ? S_WAIT : S_BODY;
    this.dispatch();
  }

  /** Request head + our X-Forwarded-* lines + the body bytes already received, in one buffer. */
  private buildHead(b: Buffer, headEnd: number, bodyEnd: number): Buffer {
    const req = this.req;
    const xff = this.xff;
    const cut = req.insertAt;
    let dropped = 0;
    for (let i = 0; i < req.drop.length; i += 2) dropped += req.drop[i + 1] - req.drop[i];
    const body = bodyEnd - headEnd;
    const out = Buffer.allocUnsafe(cut - dropped + xff.length + body);
    let o = 0;
    let from = 0;
    for (let i = 0; i < req.drop.length; i += 2) {
      o += b.copy(out, o, from, req.drop[i]);
      from = req.drop[i + 1];
    }
    o += b.copy(out, o, from, cut);
    o += xff.copy(out, o);
    if (body > 0) b.copy(out, o, headEnd, bodyEnd);
    return out;
  }

  /** Picks a node (stickiness first) and sends the request on a pooled or new connection. */
  private dispatch(): void {
    const rt = this.rt;
    const pinned = rt.spec.stickiness === 'http_cookie' && this.req.srvid !== '' ? rt.byCookie.get(this.req.srvid) : undefined;
    const node = this.attempts < MAX_ATTEMPTS ? rt.choose(this.ip, this.hash, pinned, this.tried) : undefined;
    if (node === undefined) {
      this.reply(R503, 5);
      return;
    }
    this.attempts++;
    this.setCookie = rt.spec.stickiness === 'http_cookie' && pinned !== node;
    this.node = node;
    node.active++;
    const pooled = BackendConn.take(node, this);
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
      this.rt.passiveFailure(conn.node, 'response timeout');
      this.conn = null;
      conn.destroy();
      this.reply(R504, 5);
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
      // A pooled connection the backend closed just as we reused it: replay once on a new one.
      if (conn.reused && this.replayable && this.out !== null) {
        this.releaseNode();
        this.attempts--;
        this.dispatchTo(conn.node);
        return;
      }
      this.rt.passiveFailure(conn.node, error?.message ?? 'closed without a response');
      this.reply(R502, 5);
      return;
    }
    // Cut mid-response: the client cannot get a complete answer.
    this.client.destroy();
  }

  private dispatchTo(node: NodeState): void {
    this.node = node;
    node.active++;
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
      this.rt.passiveFailure(node, `connect failed: ${reason}`);
      (this.tried ??= new Set()).add(node);
    }
    // Nothing was sent yet, so another node can take the request.
    if (this.out === null) return this.reply(R503, 5);
    this.dispatch();
  }

  onBackendEnd(conn: BackendConn): void {
    if (conn !== this.conn) return;
    if (this.state === S_TUNNEL) this.client.end();
    // Otherwise 'close' follows and decides.
  }

  onBackendData(conn: BackendConn, chunk: Buffer): void {
    if (conn !== this.conn || this.state === S_CLOSED) return;
    this.gotResponse = true;
    const rt = this.rt;
    rt.deltaOut += chunk.length;
    rt.totalOut += chunk.length;
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
        this.rt.passiveFailure(conn.node, `bad response: ${res.error}`);
        this.conn = null;
        conn.destroy();
        this.reply(R502, 5);
        return -1;
      }
      const status = res.status;
      if (status >= 100 && status < 200 && status !== 101) {
        if (++this.interim > MAX_INTERIM) {
          this.rt.passiveFailure(conn.node, 'too many interim responses');
          this.conn = null;
          conn.destroy();
          // Nothing final was sent yet, so the client can still be told (after the 1xx heads).
          this.reply(R502, 5);
          return -1;
        }
        // Interim (100 Continue): pass on and wait for the final head.
        this.client.write(view.subarray(0, n));
        at += n;
        if (at === b.length) return -1;
        continue;
      }
      this.rt.requests[(status / 100) | 0]++;
      if (status >= 500 && status !== 501 && status !== 505) this.rt.passiveFailure(conn.node, `status ${status}`);
      if (status === 101) {
        if (!this.req.upgrade) {
          this.conn = null;
          conn.destroy();
          this.reply(R502, 5);
          return -1;
        }
        this.client.write(view.subarray(0, n));
        this.state = S_TUNNEL;
        this.replayable = false;
        this.out = null;
        this.client.setTimeout(TUNNEL_IDLE_MS);
        conn.socket.setTimeout(TUNNEL_IDLE_MS);
        if (this.buf !== null) {
          conn.socket.write(this.buf);
          this.buf = null;
        }
        this.client.resume();
        if (this.clientEnded) conn.socket.end();
        if (n < view.length) this.client.write(view.subarray(n));
        return -1;
      }
      // Response framing (RFC 9112 §6.3).
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
      if (res.connClose || (!res.version11 && !res.connKeepAlive) || this.rstate === R_EOF) this.keepClient = false;
      this.out = null;
      this.replayable = false;
      const cookie = this.setCookie && this.node !== null;
      if (cookie || res.drop.length > 0) {
        // Rare: the head is rewritten (a sticky cookie added, a Content-Length beside
        // Transfer-Encoding removed) and written on its own.
        const parts: Buffer[] = [];
        let from = 0;
        for (let i = 0; i < res.drop.length; i += 2) {
          parts.push(view.subarray(from, res.drop[i]));
          from = res.drop[i + 1];
        }
        parts.push(view.subarray(from, res.insertAt));
        if (cookie) parts.push(Buffer.from(`Set-Cookie: NB_SRVID=${this.node!.cookie}; path=/\r\n`, 'latin1'));
        parts.push(view.subarray(res.insertAt, n));
        this.client.write(Buffer.concat(parts));
        this.headFrom = -1;
      } else {
        this.headFrom = at;
      }
      return at + n;
    }
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
          this.rt.passiveFailure(conn.node, 'bad chunked response');
          // Head not written yet: the client can still get a clean 502 instead of a cut.
          if (this.headFrom >= 0) return this.reply(R502, 5);
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
    if (end > writeFrom && !this.client.write(writeFrom === 0 && end === chunk.length ? chunk : chunk.subarray(writeFrom, end))) {
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

  // ---- completion ---------------------------------------------------------------------------

  private finish(): void {
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
      if (res.connClose || (!res.version11 && !res.connKeepAlive) || req.connClose || (!req.version11 && !req.connKeepAlive)) conn.destroy();
      else conn.release();
    }
    this.finishWithoutConn();
  }

  private finishWithoutConn(): void {
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

  /** A response of our own, then close. `cls` is the status class for the counters. */
  private reply(response: Buffer, cls: number): void {
    this.rt.requests[cls]++;
    this.rt.deltaOut += response.length;
    this.rt.totalOut += response.length;
    const conn = this.conn;
    this.conn = null;
    conn?.destroy();
    this.releaseNode();
    this.state = S_CLOSED;
    this.buf = null;
    this.client.end(response);
  }
}
