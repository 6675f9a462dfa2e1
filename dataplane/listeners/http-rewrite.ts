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
 * Transfer-Encoding) and, when `cookie` is given, the http_cookie stickiness line added. Rare:
 * most responses go out as received.
 */
export function responseHead(view: Buffer, res: HeadInfo, end: number, cookie: string | null, close = false): Buffer {
  const parts: Buffer[] = [];
  let from = 0;
  for (let i = 0; i < res.drop.length; i += 2) {
    parts.push(view.subarray(from, res.drop[i]));
    from = res.drop[i + 1];
  }
  parts.push(view.subarray(from, res.insertAt));
  if (cookie !== null) parts.push(Buffer.from(`Set-Cookie: NB_SRVID=${cookie}; path=/\r\n`, 'latin1'));
  if (close) parts.push(CONNECTION_CLOSE);
  parts.push(view.subarray(res.insertAt, end));
  return Buffer.concat(parts);
}
