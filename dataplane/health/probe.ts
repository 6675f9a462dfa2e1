import { connect, type Socket } from 'node:net';
import { proxyV2Local, proxyV1 } from '../../lib/proxy-protocol.js';
import type { ProxyProtocol } from '../config/model.js';
import { bodyMatcher, MATCH_TIME_LIMIT_MS } from './body-match.js';

const BODY_WINDOW = 16 * 1024;
const MAX_HEAD = 16 * 1024;

export interface ProbeSpec {
  readonly type: 'connection' | 'http' | 'http_body';
  readonly host: string;
  readonly port: number;
  readonly timeoutMs: number;
  readonly path: string;
  readonly body: RegExp | null;
  readonly proxyProtocol: ProxyProtocol;
}

/** Result of one probe: null = pass, otherwise why it failed. */
export type ProbeResult = string | null;

function proxyPreamble(sock: Socket, pp: ProxyProtocol): Buffer | null {
  if (pp === 'v2') return proxyV2Local();
  if (pp === 'v1') {
    // v1 has no LOCAL: describe the check connection itself, as the spec recommends.
    return proxyV1({ srcIp: sock.localAddress ?? '', srcPort: sock.localPort ?? 0, dstIp: sock.remoteAddress ?? '', dstPort: sock.remotePort ?? 0 });
  }
  return null;
}

/**
 * One active health probe. `connection` passes when the TCP handshake completes; `http` sends an
 * HTTP/1.0 GET with a Host header and passes on 2xx/3xx; `http_body` passes when the regex matches
 * within the first 16 KiB of the body. Backends behind PROXY protocol get a header first.
 * The regex runs on the matcher's worker thread (body-match.ts), one match at a time per probe:
 * bytes that arrive during a match are matched again once it ends.
 */
export function probe(spec: ProbeSpec): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const chunks: Buffer[] = [];
    let size = 0;
    const sock = connect({ host: spec.host, port: spec.port });
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve(r);
    };
    // A real timer, like a socket timeout: it bounds real I/O on a real connection.
    const timer = setTimeout(() => finish(`timeout after ${spec.timeoutMs} ms`), spec.timeoutMs);
    sock.on('error', (e) => finish(`connect: ${e.message}`));
    sock.on('connect', () => {
      const pre = proxyPreamble(sock, spec.proxyProtocol);
      if (spec.type === 'connection') {
        if (pre) sock.end(pre, () => finish(null));
        else finish(null);
        return;
      }
      const hostHeader = spec.host.includes(':') ? `[${spec.host}]:${spec.port}` : `${spec.host}:${spec.port}`;
      const req = Buffer.from(`GET ${spec.path} HTTP/1.0\r\nHost: ${hostHeader}\r\nUser-Agent: fulcrum-health-check\r\nAccept: */*\r\n\r\n`, 'latin1');
      sock.write(pre ? Buffer.concat([pre, req]) : req);
    });
    let matching = false;
    let dirty = false;
    let ended = false;
    const evaluate = (): void => {
      if (done) return;
      if (matching) {
        dirty = true;
        return;
      }
      const final = ended;
      const buf = Buffer.concat(chunks, size);
      const headEnd = buf.indexOf('\r\n\r\n');
      if (headEnd < 0) {
        if (final || size > MAX_HEAD) finish('no valid HTTP response head');
        return;
      }
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.subarray(0, Math.min(headEnd, 64)).toString('latin1'));
      if (!m) return finish('no valid HTTP status line');
      const status = Number(m[1]);
      if (spec.type === 'http') return finish(status >= 200 && status < 400 ? null : `status ${status}`);
      const body = buf.subarray(headEnd + 4, headEnd + 4 + BODY_WINDOW);
      const complete = final || body.length >= BODY_WINDOW;
      matching = true;
      dirty = false;
      void bodyMatcher.match(spec.body!, body.toString('utf8')).then((r) => {
        matching = false;
        if (r === 'match') return finish(null);
        if (r === 'timeout') return finish(`check_body match ran over ${MATCH_TIME_LIMIT_MS} ms`);
        if (complete) return finish('body does not match check_body');
        if (dirty || ended) evaluate();
      });
    };
    sock.on('data', (d: Buffer) => {
      if (spec.type === 'connection') return;
      chunks.push(d);
      size += d.length;
      evaluate();
    });
    sock.on('end', () => {
      if (spec.type === 'connection') return;
      ended = true;
      evaluate();
    });
  });
}
