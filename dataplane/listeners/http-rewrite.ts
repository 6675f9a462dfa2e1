import type { HeadInfo } from './http-head.js';

const CONNECTION_CLOSE = Buffer.from('Connection: close\r\n', 'latin1');
const CONNECTION_KEEP_ALIVE = Buffer.from('Connection: keep-alive\r\n', 'latin1');

/**
 * The only changes the proxy makes to heads, done on the received bytes (no re-serialisation).
 * Request: the parser's dropped lines removed and our X-Forwarded-* lines (`xff`, ending with
 * the blank line) put where the final CRLF was; the body bytes already received follow in the
 * same buffer, so head and body start go out in one write.
 */
export function requestHead(b: Buffer, req: HeadInfo, headEnd: number, bodyEnd: number, xff: Buffer): Buffer {
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

/** What becomes of a response's Connection lines (responseHead). */
export const CONN_AS_RECEIVED = 0;
/** Replaced by `Connection: close`: we close the client connection after this response. */
export const CONN_CLOSE = 1;
/**
 * Removed: the backend closes its connection after this response, but the client's connection
 * stays (Connection is hop-by-hop), and HTTP/1.1 on both sides means keep-alive without a line.
 */
export const CONN_KEEP = 2;
/** Replaced by `Connection: keep-alive`: as CONN_KEEP, with HTTP/1.0 on a side (close by default). */
export const CONN_KEEP_ALIVE = 3;
export type ConnRewrite = typeof CONN_AS_RECEIVED | typeof CONN_CLOSE | typeof CONN_KEEP | typeof CONN_KEEP_ALIVE;

/**
 * Response head `view[0, end)` with the parser's dropped lines removed (a Content-Length beside
 * Transfer-Encoding) and its Connection lines rewritten as `conn` says: the client's connection
 * and the backend's are kept or closed each on its own. When `cookie` is given, the http_cookie
 * stickiness line is added. Rare: most responses go out as received.
 */
export function responseHead(view: Buffer, res: HeadInfo, end: number, cookie: string | null, conn: ConnRewrite): Buffer {
  const parts: Buffer[] = [];
  const drop = conn !== CONN_AS_RECEIVED && res.connLines.length > 0 ? mergeRanges(res.drop, res.connLines) : res.drop;
  let from = 0;
  for (let i = 0; i < drop.length; i += 2) {
    parts.push(view.subarray(from, drop[i]));
    from = drop[i + 1];
  }
  parts.push(view.subarray(from, res.insertAt));
  if (conn === CONN_CLOSE) parts.push(CONNECTION_CLOSE);
  else if (conn === CONN_KEEP_ALIVE) parts.push(CONNECTION_KEEP_ALIVE);
  if (cookie !== null) parts.push(Buffer.from(`Set-Cookie: NB_SRVID=${cookie}; path=/\r\n`, 'latin1'));
  parts.push(view.subarray(res.insertAt, end));
  return Buffer.concat(parts);
}

/** Two sorted lists of disjoint [start, end) line ranges as one sorted list (lines never overlap). */
function mergeRanges(a: readonly number[], b: readonly number[]): number[] {
  const out: number[] = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (j >= b.length || (i < a.length && a[i] < b[j])) {
      out.push(a[i], a[i + 1]);
      i += 2;
    } else {
      out.push(b[j], b[j + 1]);
      j += 2;
    }
  }
  return out;
}
