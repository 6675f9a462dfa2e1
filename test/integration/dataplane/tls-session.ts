import { connect as tlsConnect } from 'node:tls';
import { expect } from 'vitest';

export type TlsVersion = 'TLSv1.2' | 'TLSv1.3';

/** Where a TLS session goes: the listener, the CA its certificate chains to, and the SNI name. */
export interface TlsTarget {
  ip: string;
  port: number;
  ca: string;
  servername: string;
}

/**
 * One TLS connection pinned to version `v` that sends a request; resolves, once the answer
 * starts, with whether it resumed `session` and the first session (ticket) the server gave it.
 * The server sends its tickets before it answers (TLS 1.3 sends them after the handshake).
 */
export function tlsSession(t: TlsTarget, v: TlsVersion, session?: Buffer): Promise<{ reused: boolean; next: Buffer | null }> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: t.ip, port: t.port, ca: t.ca, servername: t.servername, minVersion: v, maxVersion: v, session });
    let next: Buffer | null = null;
    s.on('session', (ticket: Buffer) => {
      next ??= ticket;
    });
    s.once('secureConnect', () => s.write('GET / HTTP/1.1\r\nHost: x\r\n\r\n'));
    s.once('data', () => {
      const reused = s.isSessionReused();
      s.destroy();
      resolve({ reused, next });
    });
    s.on('error', reject);
  });
}

/** A full handshake (no session offered, none resumed) and the ticket the server issued on it. */
export async function firstTicket(t: TlsTarget, v: TlsVersion): Promise<Buffer> {
  const first = await tlsSession(t, v);
  expect(first.reused, v).toBe(false);
  expect(first.next, v).not.toBeNull();
  return first.next!;
}
