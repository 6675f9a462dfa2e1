import { describe, expect, it } from 'vitest';
import { startHttpBackend, waitFor } from '../../helpers/backends.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';
import { firstTicket, tlsSession, useNbCerts, type TlsTarget, type TlsVersion } from './tls-session.js';
import { cleanup, startTwoWorkers, workerPids } from './workers-fixture.js';

/**
 * TLS session tickets across the workers of one data plane (docs/dataplane.md, "TLS
 * resumption"): the primary's ticket secret is every worker's, so a ticket resumes whichever
 * worker takes the next connection, and on workers started after it was issued.
 * Addresses: 127.61.20.0/24.
 */

const certs = useNbCerts();

describe('TLS resumption across workers', () => {
  it('a ticket one worker issued resumes on the other, and on workers started after it (reload); never on another config', async () => {
    const backend = await startHttpBackend('tls-w', '127.61.20.2');
    cleanup.push(() => backend.close());
    const ip = '127.61.20.1';
    const a = config(7620, [node(backend.address)], { protocol: 'https', sslCert: certs.certA.cert, sslKey: certs.certA.key });
    const b = config(7621, [node(backend.address)], { protocol: 'https', sslCert: certs.certB.cert, sslKey: certs.certB.key });
    const dp = await startTwoWorkers(snapshot(1, [nodebalancer(ip, [a, b])]));
    const onA: TlsTarget = { ip, port: 7620, ca: certs.ca.cert, servername: 'a.nb.test' };
    const onB: TlsTarget = { ip, port: 7621, ca: certs.ca.cert, servername: 'b.nb.test' };
    await waitFor(() => tlsSession(onA, 'TLSv1.3').then(() => true, () => false), 30_000, 'https listener up');

    const tickets: Record<TlsVersion, Buffer> = { 'TLSv1.2': Buffer.alloc(0), 'TLSv1.3': Buffer.alloc(0) };
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      tickets[v] = await firstTicket(onA, v);
      // Round-robin hands consecutive connections to alternate workers: with a secret per
      // worker about half of these would make a full handshake.
      const reused: boolean[] = [];
      for (let i = 0; i < 8; i++) reused.push((await tlsSession(onA, v, tickets[v])).reused);
      expect(reused, v).toEqual(Array(8).fill(true));
      // Keys are derived per config: config b (same NodeBalancer, same processes) does not take a's ticket.
      expect((await tlsSession(onB, v, tickets[v])).reused, v).toBe(false);
    }

    // A reload replaces both workers with new processes; the tickets issued before still resume.
    const before = workerPids(dp.pid);
    process.kill(dp.pid, 'SIGHUP');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && now.every((p) => !before.includes(p));
    }, 60_000, 'the old workers replaced');
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      for (let i = 0; i < 4; i++) expect((await tlsSession(onA, v, tickets[v])).reused, `${v} after reload`).toBe(true);
    }
  });
});
