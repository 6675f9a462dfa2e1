import { readFileSync } from 'node:fs';
import { connect as tlsConnect } from 'node:tls';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { makeCa, makeCert, type Pem } from '../../helpers/certs.js';
import { startHttpBackend, waitFor } from '../../helpers/backends.js';
import { startDataplaneProcess, type DataplaneProcess } from '../../security/dataplane-process.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';

/**
 * TLS session tickets across the workers of one data plane (docs/dataplane.md, "TLS
 * resumption"): the primary's ticket secret is every worker's, so a ticket resumes whichever
 * worker takes the next connection, and on workers started after it was issued.
 * Addresses: 127.61.20.0/24.
 */

function workerPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

const cleanup: (() => Promise<void> | void)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});
afterAll(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

let ca: Pem;
let certA: Pem;
let certB: Pem;
beforeAll(() => {
  ca = makeCa();
  certA = makeCert(ca, 'a.nb.test');
  certB = makeCert(ca, 'b.nb.test');
});

type Version = 'TLSv1.2' | 'TLSv1.3';

/** One TLS connection with one request: whether it resumed `session`, and the first ticket it got. */
function tlsSession(ip: string, port: number, name: string, v: Version, session?: Buffer): Promise<{ reused: boolean; next: Buffer | null }> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: ip, port, ca: ca.cert, servername: name, minVersion: v, maxVersion: v, session });
    let next: Buffer | null = null;
    s.on('session', (t: Buffer) => {
      next ??= t;
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

async function ticket(ip: string, port: number, name: string, v: Version): Promise<Buffer> {
  const first = await tlsSession(ip, port, name, v);
  expect(first.reused, v).toBe(false);
  expect(first.next, v).not.toBeNull();
  return first.next!;
}

describe('TLS resumption across workers', () => {
  it('a ticket one worker issued resumes on the other, and on workers started after it (reload); never on another config', async () => {
    const backend = await startHttpBackend('tls-w', '127.61.20.2');
    cleanup.push(() => backend.close());
    const ip = '127.61.20.1';
    const a = config(7620, [node(backend.address)], { protocol: 'https', sslCert: certA.cert, sslKey: certA.key });
    const b = config(7621, [node(backend.address)], { protocol: 'https', sslCert: certB.cert, sslKey: certB.key });
    const dp: DataplaneProcess = await startDataplaneProcess(snapshot(1, [nodebalancer(ip, [a, b])]), { flags: ['--workers', '2', '--distribution', 'rr'] });
    cleanup.push(() => dp.stop());
    await waitFor(() => workerPids(dp.pid).length === 2, 30_000, 'two workers');
    await waitFor(() => tlsSession(ip, 7620, 'a.nb.test', 'TLSv1.3').then(() => true, () => false), 30_000, 'https listener up');

    const tickets: Record<Version, Buffer> = { 'TLSv1.2': Buffer.alloc(0), 'TLSv1.3': Buffer.alloc(0) };
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      tickets[v] = await ticket(ip, 7620, 'a.nb.test', v);
      // Round-robin hands consecutive connections to alternate workers: with a secret per
      // worker about half of these would make a full handshake.
      const reused: boolean[] = [];
      for (let i = 0; i < 8; i++) reused.push((await tlsSession(ip, 7620, 'a.nb.test', v, tickets[v])).reused);
      expect(reused, v).toEqual(Array(8).fill(true));
      // Keys are derived per config: config b (same NodeBalancer, same processes) does not take a's ticket.
      expect((await tlsSession(ip, 7621, 'b.nb.test', v, tickets[v])).reused, v).toBe(false);
    }

    // A reload replaces both workers with new processes; the tickets issued before still resume.
    const before = workerPids(dp.pid);
    process.kill(dp.pid, 'SIGHUP');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && now.every((p) => !before.includes(p));
    }, 60_000, 'the old workers replaced');
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      for (let i = 0; i < 4; i++) expect((await tlsSession(ip, 7620, 'a.nb.test', v, tickets[v])).reused, `${v} after reload`).toBe(true);
    }
  });
});
