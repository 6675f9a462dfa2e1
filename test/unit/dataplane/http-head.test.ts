import { describe, expect, it } from 'vitest';
import { BAD, HeadInfo, NEED_MORE, parseRequestHead, parseResponseHead } from '../../../dataplane/listeners/http-head.js';
import { CHUNK_ERROR, ChunkedTracker } from '../../../dataplane/listeners/chunked.js';
import { CONN_AS_RECEIVED, CONN_CLOSE, responseHead } from '../../../dataplane/listeners/http-rewrite.js';

const b = (s: string) => Buffer.from(s, 'latin1');

describe('request head parser', () => {
  it('parses framing, connection options, upgrade and the NB_SRVID cookie', () => {
    const h = new HeadInfo();
    const raw = 'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 12\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nCookie: a=1; NB_SRVID=abc123; z=2\r\nX-Forwarded-Proto: evil\r\n\r\nbody';
    const n = parseRequestHead(b(raw), h);
    expect(n).toBe(raw.indexOf('body'));
    expect(h.contentLength).toBe(12);
    expect(h.connKeepAlive && h.connUpgrade && h.upgrade).toBe(true);
    expect(h.srvid).toBe('abc123');
    expect(h.drop).toHaveLength(2);
    expect(b(raw).subarray(h.drop[0], h.drop[1]).toString()).toBe('X-Forwarded-Proto: evil\r\n');
    expect(h.version11).toBe(true);
  });

  it("drops an HTTP/1.1 request's `Connection: close` line (hop-by-hop) and keeps an HTTP/1.0 one", () => {
    const h = new HeadInfo();
    const raw = 'GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\nAccept: */*\r\n\r\n';
    expect(parseRequestHead(b(raw), h)).toBe(raw.length);
    expect(h.connClose && h.closeStripped).toBe(true);
    expect(b(raw).subarray(h.drop[0], h.drop[1]).toString()).toBe('Connection: close\r\n');
    const old = 'GET / HTTP/1.0\r\nHost: a\r\nConnection: close\r\n\r\n';
    expect(parseRequestHead(b(old), h)).toBe(old.length);
    expect(h.connClose).toBe(true);
    expect(h.closeStripped).toBe(false);
    expect(h.drop).toHaveLength(0);
    // Any other Connection value is passed on as received.
    expect(parseRequestHead(b('GET / HTTP/1.1\r\nConnection: close, TE\r\nTE: trailers\r\n\r\n'), h)).toBeGreaterThan(0);
    expect(h.connClose).toBe(true);
    expect(h.closeStripped).toBe(false);
    expect(h.drop).toHaveLength(0);
  });

  it('rewrites a response head for a client that asked to close: Connection lines replaced, other drops kept', () => {
    const h = new HeadInfo();
    const raw = 'HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nContent-Length: 3\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n';
    const n = parseResponseHead(b(raw), h);
    expect(n).toBe(raw.length);
    const out = responseHead(b(raw), h, n, 'c1', CONN_CLOSE).toString('latin1');
    expect(out).toBe('HTTP/1.1 200 OK\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\nConnection: close\r\nSet-Cookie: NB_SRVID=c1; path=/\r\n\r\n');
    // Without `close` the Connection line stays.
    expect(responseHead(b(raw), h, n, null, CONN_AS_RECEIVED).toString('latin1')).toBe('HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nTransfer-Encoding: chunked\r\n\r\n');
  });

  it('waits for more bytes and enforces the head size limit', () => {
    const h = new HeadInfo();
    expect(parseRequestHead(b('GET / HTTP/1.1\r\nHost: a\r\n'), h)).toBe(NEED_MORE);
    expect(parseRequestHead(b(`GET / HTTP/1.1\r\nX: ${'a'.repeat(17000)}`), h)).toBe(BAD);
  });

  it.each([
    ['obs-fold', 'GET / HTTP/1.1\r\nA: b\r\n c\r\n\r\n'],
    ['space before colon', 'GET / HTTP/1.1\r\nHost : a\r\n\r\n'],
    ['CL and TE', 'POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n'],
    ['conflicting CL', 'POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\n'],
    ['bad CL', 'POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n'],
    ['TE not chunked', 'POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n'],
    ['TE list ending in chunked', 'POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n'],
    ['TE chunked twice', 'POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n'],
    ['TE in HTTP/1.0', 'POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n'],
    ['equal CL twice', 'POST / HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\n'],
    ['HTTP/2', 'GET / HTTP/2.0\r\n\r\n'],
    ['bare LF', 'GET / HTTP/1.1\r\nA: b\n\r\n\r\n'],
    ['no target', 'GET  HTTP/1.1\r\n\r\n'],
  ])('rejects %s', (_name, raw) => {
    expect(parseRequestHead(b(raw), new HeadInfo())).toBe(BAD);
  });
});

describe('response head parser', () => {
  it('parses status and framing', () => {
    const h = new HeadInfo();
    expect(parseResponseHead(b('HTTP/1.1 204 No Content\r\nConnection: close\r\n\r\n'), h)).toBeGreaterThan(0);
    expect(h.status).toBe(204);
    expect(h.connClose).toBe(true);
    parseResponseHead(b('HTTP/1.0 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n'), h);
    expect(h.otherEncoding).toBe(true);
    expect(h.version11).toBe(false);
    expect(parseResponseHead(b('HTTP/1.1 99 x\r\n\r\n'), h)).toBe(BAD);
  });
});

describe('chunked tracker', () => {
  const msg = '4;ext=1\r\nWiki\r\n5\r\npedia\r\nE\r\n in\r\n\r\nchunks.\r\n0\r\nTrailer: x\r\n\r\n';
  it('finds the end of a chunked body fed in one piece or byte by byte', () => {
    const t = new ChunkedTracker();
    const whole = b(msg + 'NEXT');
    expect(t.feed(whole, 0)).toBe(msg.length);
    t.reset();
    let end = -1;
    for (let i = 0; i < msg.length && end < 0; i++) {
      const r = t.feed(b(msg[i]), 0);
      if (r >= 0) end = i;
    }
    expect(end).toBe(msg.length - 1);
  });

  it('rejects bad syntax', () => {
    expect(new ChunkedTracker().feed(b('zz\r\n'), 0)).toBe(CHUNK_ERROR);
    expect(new ChunkedTracker().feed(b('3\r\nabcX'), 0)).toBe(CHUNK_ERROR);
    expect(new ChunkedTracker().feed(b('1234567890123456\r\n'), 0)).toBe(CHUNK_ERROR);
  });
});

describe('parsers under random input', () => {
  it('never throw, whatever the bytes', () => {
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) >>> 0) >>> 16) & 0xff;
    const alphabet = b('GET /HTTP1.0\r\n :;,chunkedContent-LengthTransfer-Encoding0123456789abcdefxyz\t');
    const h = new HeadInfo();
    for (let i = 0; i < 3000; i++) {
      const len = rnd() * 2;
      const buf = Buffer.alloc(len + 4);
      for (let j = 0; j < len; j++) buf[j] = i % 2 ? rnd() : alphabet[rnd() % alphabet.length];
      buf.write('\r\n\r\n', len, 'latin1');
      const r1 = parseRequestHead(buf, h);
      const r2 = parseResponseHead(buf, h);
      expect(r1 === BAD || r1 === NEED_MORE || r1 > 0).toBe(true);
      expect(r2 === BAD || r2 === NEED_MORE || r2 > 0).toBe(true);
      const t = new ChunkedTracker();
      const r3 = t.feed(buf, 0);
      expect(r3 === CHUNK_ERROR || r3 === -1 || r3 > 0).toBe(true);
    }
  });
});
