import type { HeadInfo } from './http-head.js';

const CONNECTION_CLOSE = Buffer.from('Connection: close\r\n', 'latin1');

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

/**
 * Response head `view[0, end)` with the parser's dropped lines removed (a Content-Length beside
 * Transfer-Encoding), and, when `close` is set, its Connection lines replaced by
 * `Connection: close` (the client asked to close, but the backend was not told so and may have
 * answered keep-alive). When `cookie` is given, the http_cookie stickiness line is added. Rare:
 * most responses go out as received.
 */
export function responseHead(view: Buffer, res: HeadInfo, end: number, cookie: string | null, close: boolean): Buffer {
  const parts: Buffer[] = [];
  const drop = close && res.connLines.length > 0 ? mergeRanges(res.drop, res.connLines) : res.drop;
  let from = 0;
  for (let i = 0; i < drop.length; i += 2) {
    parts.push(view.subarray(from, drop[i]));
    from = drop[i + 1];
  }
  parts.push(view.subarray(from, res.insertAt));
  if (close) parts.push(CONNECTION_CLOSE);
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
