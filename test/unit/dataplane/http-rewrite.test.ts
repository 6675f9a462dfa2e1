import { describe, expect, it } from 'vitest';
import { HeadInfo, parseResponseHead } from '../../../dataplane/listeners/http-head.js';
import { CONN_KEEP, CONN_KEEP_ALIVE, responseHead } from '../../../dataplane/listeners/http-rewrite.js';
import { idempotent } from '../../../dataplane/listeners/retry.js';

const b = (s: string) => Buffer.from(s, 'latin1');

function rewrite(raw: string, conn: typeof CONN_KEEP | typeof CONN_KEEP_ALIVE): string {
  const h = new HeadInfo();
  const n = parseResponseHead(b(raw), h);
  expect(n).toBe(raw.length);
  return responseHead(b(raw), h, n, null, conn).toString('latin1');
}

describe('response Connection lines when the backend closes but the client stays', () => {
  it('HTTP/1.1 on both sides: the backend\'s Connection line is removed', () => {
    expect(rewrite('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\nServer: nginx\r\n\r\n', CONN_KEEP))
      .toBe('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nServer: nginx\r\n\r\n');
  });

  it('HTTP/1.0 on a side: replaced by Connection: keep-alive (1.0 closes by default)', () => {
    expect(rewrite('HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n', CONN_KEEP_ALIVE))
      .toBe('HTTP/1.0 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n');
    expect(rewrite('HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n', CONN_KEEP_ALIVE))
      .toBe('HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n');
  });
});

describe('idempotent methods (what a failed reused connection may replay)', () => {
  it.each(['GET', 'HEAD', 'PUT', 'DELETE', 'OPTIONS', 'TRACE'])('%s is replayable', (m) => {
    expect(idempotent(b(`${m} / HTTP/1.1\r\n\r\n`))).toBe(true);
  });
  it.each(['POST', 'PATCH', 'CONNECT', 'GETX', 'PROPFIND'])('%s is not', (m) => {
    expect(idempotent(b(`${m} / HTTP/1.1\r\n\r\n`))).toBe(false);
  });
});
