import { connect, type Socket } from 'node:net';
import { proxyV2Local, proxyV1 } from '../../lib/proxy-protocol.js';
import type { ProxyProtocol } from '../config/model.js';
import { bodyMatcher, MATCH_TIME_LIMIT_MS, type MatchOwner } from './body-match.js';

const BODY_WINDOW = 16 * 1024;
const MAX_HEAD = 16 * 1024;

export interface ProbeSpec {
  readonly type: 'connection' | 'http' | 'http_body';
  readonly host: string;
  readonly port: number;
  readonly timeoutMs: number;
  readonly path: string;
  readonly body: RegExp | null;
  /** The config whose check this is: check_body matches are scheduled per config. */
  readonly owner: MatchOwner;
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

/** The declared body length of a response head, when it declares one. */
function contentLength(head: string): number | undefined {
  for (const line of head.split('\r\n')) {
    const colon = line.indexOf(':');
    if (colon < 0 || line.slice(0, colon).trim().toLowerCase() !== 'content-length') continue;
    const v = line.slice(colon + 1).trim();
    return /^\d{1,15}$/.test(v) ? Number(v) : undefined;
  }
  return undefined;
}

/**
 * One active health probe. `connection` passes when the TCP handshake completes; `http` sends an
 * HTTP/1.0 GET with a Host header and passes on 2xx/3xx; `http_body` passes when the regex matches
 * within the first 16 KiB of the body. Backends behind PROXY protocol get a header first.
 * The regex runs once per probe, on the matcher's worker thread (body-match.ts), when the body
 * window is complete: the response ended, its Content-Length arrived, or 16 KiB did. (Matching
 * each chunk as it came let a backend that trickles its body run the pattern many times.)
 * When the probe ends first (its timeout, or `stop`), its match is dropped unrun.
 */
export function probe(spec: ProbeSpec, stop?: AbortSignal): Promise<ProbeResult> {
  return new Promise((resolve) => {
    let done = false;
    const chunks: Buffer[] = [];
    let size = 0;
    const ended = new AbortController();
    const sock = connect({ host: spec.host, port: spec.port });
    const onStop = (): void => finish('check stopped');
    const finish = (r: ProbeResult) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      stop?.removeEventListener('abort', onStop);
      ended.abort();
      sock.destroy();
      resolve(r);
    };
    // A real timer, like a socket timeout: it bounds real I/O on a real connection.
    const timer = setTimeout(() => finish(`timeout after ${spec.timeoutMs} ms`), spec.timeoutMs);
    if (stop?.aborted) return finish('check stopped');
    stop?.addEventListener('abort', onStop, { once: true });
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
    let atEnd = false;
    const evaluate = (): void => {
      if (done || matching) return;
      const buf = Buffer.concat(chunks, size);
      const headEnd = buf.indexOf('\r\n\r\n');
      if (headEnd < 0) {
        if (atEnd || size > MAX_HEAD) finish('no valid HTTP response head');
        return;
      }
      const m = /^HTTP\/1\.[01] (\d{3})/.exec(buf.subarray(0, Math.min(headEnd, 64)).toString('latin1'));
      if (!m) return finish('no valid HTTP status line');
      const status = Number(m[1]);
      if (spec.type === 'http') return finish(status >= 200 && status < 400 ? null : `status ${status}`);
      const declared = contentLength(buf.subarray(0, headEnd).toString('latin1'));
      const window = Math.min(BODY_WINDOW, declared ?? BODY_WINDOW);
      const body = buf.subarray(headEnd + 4, headEnd + 4 + window);
      if (!atEnd && body.length < window) return;
      matching = true;
      void bodyMatcher.match(spec.owner, spec.body!, body.toString('utf8'), ended.signal).then((r) => {
        if (r === 'match') finish(null);
        else if (r === 'no_match') finish('body does not match check_body');
        else if (r === 'timeout') finish(`check_body match ran over ${MATCH_TIME_LIMIT_MS} ms`);
        else if (r === 'quarantined') finish('check_body quarantined: its matches took too long');
        else if (r === 'queue_full') finish('check_body: too many matches waiting');
      });
    };
    sock.on('data', (d: Buffer) => {
      // Once the window is being matched, the rest of the response is not needed.
      if (spec.type === 'connection' || matching) return;
      chunks.push(d);
      size += d.length;
      evaluate();
    });
    sock.on('end', () => {
      if (spec.type === 'connection') return;
      atEnd = true;
      evaluate();
    });
  });
}
