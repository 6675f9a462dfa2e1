import { connect as tlsConnect } from 'node:tls';
import { beforeAll, expect } from 'vitest';
import { makeCa, makeCert, type Pem } from '../../helpers/certs.js';

/** A test CA and the certificates of two https configs, `a.nb.test` and `b.nb.test`. */
export interface NbCerts {
  ca: Pem;
  certA: Pem;
  certB: Pem;
}

/** Registers a beforeAll that makes the file's `NbCerts` once; read them in tests and hooks. */
export function useNbCerts(): NbCerts {
  const certs = {} as NbCerts;
  beforeAll(() => {
    certs.ca = makeCa();
    certs.certA = makeCert(certs.ca, 'a.nb.test');
    certs.certB = makeCert(certs.ca, 'b.nb.test');
  });
  return certs;
}

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
