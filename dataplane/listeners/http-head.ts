/**
 * Strict HTTP/1.x head parsing over raw bytes, for the proxy's fast path. Only what routing and
 * framing need is extracted (method, version, Content-Length, Transfer-Encoding, Connection,
 * Upgrade, the NB_SRVID cookie); every other byte is forwarded untouched. Anything ambiguous
 * (obs-fold, whitespace before a colon, bare LF, CL+TE together, a repeated Content-Length or
 * Transfer-Encoding, a coding list, Transfer-Encoding in HTTP/1.0) is rejected, because a proxy
 * that guesses is a request-smuggling vector.
 * Results go into a caller-owned HeadInfo so that parsing allocates almost nothing.
 */

export const MAX_REQUEST_HEAD = 16 * 1024;
const MAX_RESPONSE_HEAD = 64 * 1024;

export const NEED_MORE = -1;
export const BAD = -2;

const LF = 10;
const CR = 13;
const SP = 32;
const HT = 9;
const COLON = 58;

export class HeadInfo {
  /** Index just past the blank line ending the head. */
  end = 0;
  /** Index of the final CRLF (where extra header lines can be inserted). */
  insertAt = 0;
  version11 = true;
  isHead = false;
  status = 0;
  contentLength = -1;
  chunked = false;
  /** Transfer-Encoding present but not ending in chunked (responses: read until close). */
  otherEncoding = false;
  connClose = false;
  /** A request's `Connection: close` line is dropped: the backend connection may be kept. */
  closeStripped = false;
  connKeepAlive = false;
  connUpgrade = false;
  upgrade = false;
  /** NB_SRVID cookie value, '' when absent. */
  srvid = '';
  /**
   * Byte ranges [start, end) of header lines to drop: a client-sent X-Forwarded-Proto or
   * `Connection: close`, or a response's Content-Length sent along with Transfer-Encoding
   * (RFC 9112 §6.3).
   */
  readonly drop: number[] = [];
  /** Byte ranges [start, end) of a response's Connection lines (replaced when we close the client). */
  readonly connLines: number[] = [];
  error = '';

  reset(): void {
    this.end = this.insertAt = this.status = 0;
    this.version11 = true;
    this.isHead = this.chunked = this.otherEncoding = this.connClose = this.closeStripped = this.connKeepAlive = this.connUpgrade = this.upgrade = false;
    this.contentLength = -1;
    this.srvid = '';
    this.drop.length = 0;
    this.connLines.length = 0;
    this.error = '';
  }
}

function eqLower(b: Buffer, at: number, name: string): boolean {
  for (let i = 0; i < name.length; i++) if ((b[at + i] | 0x20) !== name.charCodeAt(i)) return false;
  return true;
}

function isTokenChar(c: number): boolean {
  // RFC 9110 tchar
  return (c >= 0x61 && c <= 0x7a) || (c >= 0x41 && c <= 0x5a) || (c >= 0x30 && c <= 0x39) ||
    c === 0x21 || (c >= 0x23 && c <= 0x27) || c === 0x2a || c === 0x2b || c === 0x2d || c === 0x2e ||
    c === 0x5e || c === 0x5f || c === 0x60 || c === 0x7c || c === 0x7e;
}

function parseVersion(b: Buffer, at: number, h: HeadInfo): boolean {
  // "HTTP/1.1" or "HTTP/1.0"
  if (b[at] !== 0x48 || b[at + 1] !== 0x54 || b[at + 2] !== 0x54 || b[at + 3] !== 0x50 || b[at + 4] !== 0x2f || b[at + 5] !== 0x31 || b[at + 6] !== 0x2e) return false;
  const minor = b[at + 7];
  if (minor === 0x31) h.version11 = true;
  else if (minor === 0x30) h.version11 = false;
  else return false;
  return true;
}

/** Parses the header fields from `pos` up to the blank line at `blank`. */
function parseFields(b: Buffer, pos: number, blank: number, h: HeadInfo, request: boolean): boolean {
  let sawCl = false;
  let sawTe = false;
  while (pos < blank) {
    const lf = b.indexOf(LF, pos);
    if (lf < 0 || lf > blank || b[lf - 1] !== CR) return fail(h, 'header line not ended by CRLF');
    const lineEnd = lf - 1;
    const first = b[pos];
    if (first === SP || first === HT) return fail(h, 'obsolete line folding');
    let colon = pos;
    while (colon < lineEnd && b[colon] !== COLON) {
      if (!isTokenChar(b[colon])) return fail(h, 'bad character in header name');
      colon++;
    }
    if (colon === lineEnd || colon === pos) return fail(h, 'header line without a name or colon');
    const nameLen = colon - pos;
    // A bare CR, NUL or other control byte in a value ends the line early for some servers
    // (RFC 9112 §2.2): refuse it rather than forward a head two parsers read differently.
    for (let i = colon + 1; i < lineEnd; i++) {
      const c = b[i];
      if ((c < 0x20 && c !== HT) || c === 0x7f) return fail(h, 'control character in header value');
    }
    let vs = colon + 1;
    while (vs < lineEnd && (b[vs] === SP || b[vs] === HT)) vs++;
    let ve = lineEnd;
    while (ve > vs && (b[ve - 1] === SP || b[ve - 1] === HT)) ve--;
    const c0 = b[pos] | 0x20;
    if (nameLen === 14 && c0 === 0x63 && eqLower(b, pos, 'content-length')) {
      let n = 0;
      if (ve === vs || ve - vs > 15) return fail(h, 'bad Content-Length');
      for (let i = vs; i < ve; i++) {
        const d = b[i] - 0x30;
        if (d < 0 || d > 9) return fail(h, 'bad Content-Length');
        n = n * 10 + d;
      }
      if (sawCl && n !== h.contentLength) return fail(h, 'conflicting Content-Length');
      // Even an equal repeat is refused in a request: a backend that joins the two lines into
      // "5, 5" reads no valid length (RFC 9112 §6.3 allows either reading).
      if (sawCl && request) return fail(h, 'duplicate Content-Length');
      sawCl = true;
      h.contentLength = n;
      // Kept in case Transfer-Encoding follows (then removed before the head goes on).
      if (!request) h.drop.push(pos, lf + 1);
    } else if (nameLen === 17 && c0 === 0x74 && eqLower(b, pos, 'transfer-encoding')) {
      const v = b.toString('latin1', vs, ve).toLowerCase();
      if (request) {
        // RFC 9112 §6.1: an HTTP/1.0 request with Transfer-Encoding has faulty framing, and a
        // request's only coding we frame is one `chunked`. A list ("gzip, chunked", "chunked,
        // chunked") or a second line is read differently by different servers: refused.
        if (!h.version11) return fail(h, 'Transfer-Encoding in an HTTP/1.0 request');
        if (sawTe) return fail(h, 'duplicate Transfer-Encoding');
        if (v !== 'chunked') return fail(h, 'unsupported Transfer-Encoding');
      }
      sawTe = true;
      const last = v.slice(v.lastIndexOf(',') + 1).trim();
      if (last === 'chunked') {
        h.chunked = true;
        h.otherEncoding = false;
      } else {
        h.chunked = false;
        h.otherEncoding = true;
      }
    } else if (nameLen === 10 && c0 === 0x63 && eqLower(b, pos, 'connection')) {
      if (!request) h.connLines.push(pos, lf + 1);
      // Fast paths for the two common single values, without a string allocation.
      const len = ve - vs;
      if (len === 10 && eqLower(b, vs, 'keep-alive')) {
        h.connKeepAlive = true;
        pos = lf + 1;
        continue;
      }
      if (len === 5 && eqLower(b, vs, 'close')) {
        h.connClose = true;
        // An HTTP/1.1 client's close is about its own connection (hop-by-hop): the line is not
        // passed on, so the backend connection stays open for the pool (docs/dataplane.md).
        if (request && h.version11) {
          h.drop.push(pos, lf + 1);
          h.closeStripped = true;
        }
        pos = lf + 1;
        continue;
      }
      const v = b.toString('latin1', vs, ve).toLowerCase();
      for (const tok of v.split(',')) {
        const t = tok.trim();
        if (t === 'close') h.connClose = true;
        else if (t === 'keep-alive') h.connKeepAlive = true;
        else if (t === 'upgrade') h.connUpgrade = true;
      }
    } else if (request && nameLen === 7 && c0 === 0x75 && eqLower(b, pos, 'upgrade')) {
      h.upgrade = ve > vs;
    } else if (request && nameLen === 6 && c0 === 0x63 && eqLower(b, pos, 'cookie')) {
      const v = b.toString('latin1', vs, ve);
      const i = v.indexOf('NB_SRVID=');
      if (i >= 0 && (i === 0 || v[i - 1] === ' ' || v[i - 1] === ';')) {
        const e = v.indexOf(';', i);
        h.srvid = v.slice(i + 9, e < 0 ? v.length : e).trim();
      }
    } else if (request && nameLen === 17 && c0 === 0x78 && eqLower(b, pos, 'x-forwarded-proto')) {
      // We set it from what we received; a client's own value is dropped, not trusted.
      h.drop.push(pos, lf + 1);
    }
    pos = lf + 1;
  }
  if (sawCl && sawTe) {
    if (request) return fail(h, 'both Content-Length and Transfer-Encoding');
    // Framing follows Transfer-Encoding; passing the Content-Length on too would let a
    // downstream parser that prefers it read a different message.
    h.contentLength = -1;
  } else if (!request) {
    h.drop.length = 0;
  }
  if (request && h.otherEncoding) return fail(h, 'unsupported Transfer-Encoding');
  return true;
}

function fail(h: HeadInfo, why: string): false {
  h.error = why;
  return false;
}

function findBlank(b: Buffer, from: number): number {
  return b.indexOf('\r\n\r\n', from, 'latin1');
}

/**
 * Parses a request head at the start of `b`. Returns the head length, NEED_MORE, or BAD
 * (h.error says why; too large when NEED_MORE would pass MAX_REQUEST_HEAD).
 */
export function parseRequestHead(b: Buffer, h: HeadInfo): number {
  h.reset();
  const blank = findBlank(b, 0);
  if (blank < 0) {
    if (b.length > MAX_REQUEST_HEAD) return (h.error = 'request head too large'), BAD;
    return NEED_MORE;
  }
  if (blank + 4 > MAX_REQUEST_HEAD) return (h.error = 'request head too large'), BAD;
  const lf = b.indexOf(LF);
  if (b[lf - 1] !== CR) return (h.error = 'request line not ended by CRLF'), BAD;
  let i = 0;
  while (i < lf && isTokenChar(b[i])) i++;
  if (i === 0 || b[i] !== SP) return (h.error = 'bad method'), BAD;
  h.isHead = i === 4 && b[0] === 0x48 && b[1] === 0x45 && b[2] === 0x41 && b[3] === 0x44;
  const t = i + 1;
  let j = t;
  while (j < lf && b[j] > SP && b[j] < 0x7f) j++;
  if (j === t || b[j] !== SP || j + 1 + 8 !== lf - 1) return (h.error = 'bad request target or version'), BAD;
  if (!parseVersion(b, j + 1, h)) return (h.error = 'unsupported HTTP version'), BAD;
  if (!parseFields(b, lf + 1, blank + 2, h, true)) return BAD;
  h.end = blank + 4;
  h.insertAt = blank + 2;
  return h.end;
}

/** Parses a response head at the start of `b`. Same return convention as parseRequestHead. */
export function parseResponseHead(b: Buffer, h: HeadInfo): number {
  h.reset();
  const blank = findBlank(b, 0);
  if (blank < 0) {
    if (b.length > MAX_RESPONSE_HEAD) return (h.error = 'response head too large'), BAD;
    return NEED_MORE;
  }
  const lf = b.indexOf(LF);
  if (b[lf - 1] !== CR || lf < 13) return (h.error = 'bad status line'), BAD;
  if (!parseVersion(b, 0, h) || b[8] !== SP) return (h.error = 'bad status line'), BAD;
  const s0 = b[9] - 0x30;
  const s1 = b[10] - 0x30;
  const s2 = b[11] - 0x30;
  if (s0 < 1 || s0 > 5 || s1 < 0 || s1 > 9 || s2 < 0 || s2 > 9 || (b[12] !== SP && b[12] !== CR)) return (h.error = 'bad status code'), BAD;
  h.status = s0 * 100 + s1 * 10 + s2;
  if (!parseFields(b, lf + 1, blank + 2, h, false)) return BAD;
  h.end = blank + 4;
  h.insertAt = blank + 2;
  return h.end;
}
