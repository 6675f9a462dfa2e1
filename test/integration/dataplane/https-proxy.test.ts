import { connect as tlsConnect } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { makeCert, makeDhParams } from '../../helpers/certs.js';
import { loopback, startHttpBackend } from '../../helpers/backends.js';
import { cleanup, newEngine } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { httpsGet } from './http-client.js';
import { firstTicket, tlsSession, useNbCerts } from './tls-session.js';

const certs = useNbCerts();

async function setup() {
  const backend = await startHttpBackend('tls-backend');
  cleanup.push(() => backend.close());
  const ip = loopback();
  const [p1, p2] = [await freePort(ip), await freePort(ip)];
  const { engine } = newEngine();
  const c1 = config(p1, [node(backend.address)], { protocol: 'https', sslCert: certs.certA.cert, sslKey: certs.certA.key });
  const c2 = config(p2, [node(backend.address)], { protocol: 'https', sslCert: certs.certB.cert, sslKey: certs.certB.key, cipherSuite: 'legacy' });
  const nb = nodebalancer(ip, [c1, c2]);
  await engine.apply(snapshot(1, [nb]));
  return { backend, ip, p1, p2, engine, nb, c1, c2 };
}

/** Handshake only; resolves with the negotiated cipher or rejects. */
function handshake(ip: string, port: number, opts: { ciphers?: string; maxVersion?: 'TLSv1.2' | 'TLSv1.3'; servername: string }): Promise<string> {
  return new Promise((resolve, reject) => {
    const s = tlsConnect({ host: ip, port, ca: certs.ca.cert, servername: opts.servername, ciphers: opts.ciphers, maxVersion: opts.maxVersion }, () => {
      const c = s.getCipher().name;
      s.destroy();
      resolve(c);
    });
    s.on('error', reject);
  });
}

describe('https proxy', () => {
  it('resumes a TLS session from its ticket on a new connection (TLS 1.2 and 1.3), so a returning client skips the full handshake', async () => {
    const { ip, p1 } = await setup();
    const target = { ip, port: p1, ca: certs.ca.cert, servername: 'a.nb.test' };
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      const ticket = await firstTicket(target, v);
      const second = await tlsSession(target, v, ticket);
      expect(second.reused, v).toBe(true);
    }
  });

  it('completes TLS 1.2 and TLS 1.3 handshakes with the config certificate and proxies as http', async () => {
    const { backend, ip, p1 } = await setup();
    const client = loopback();
    for (const v of ['TLSv1.2', 'TLSv1.3'] as const) {
      const r = await httpsGet(`https://${ip}:${p1}/x`, { ca: certs.ca.cert, minVersion: v, maxVersion: v, servername: 'a.nb.test', localAddress: client });
      expect(r.protocol).toBe(v);
      expect(r.cert.subject.CN).toBe('a.nb.test');
      expect(r.status).toBe(200);
      expect(r.body.toString()).toBe('tls-backend');
    }
    expect(backend.lastHeaders!['x-forwarded-proto']).toBe('https');
    expect(backend.lastHeaders!['x-forwarded-for']).toBe(client);
  });

  it('serves each https config its own certificate on one NodeBalancer', async () => {
    const { ip, p1, p2 } = await setup();
    const a = await httpsGet(`https://${ip}:${p1}/`, { ca: certs.ca.cert, servername: 'a.nb.test' });
    const b = await httpsGet(`https://${ip}:${p2}/`, { ca: certs.ca.cert, servername: 'b.nb.test' });
    expect(a.cert.subject.CN).toBe('a.nb.test');
    expect(b.cert.subject.CN).toBe('b.nb.test');
  });

  it('refuses TLS 1.1', async () => {
    const { ip, p1 } = await setup();
    await expect(new Promise((resolve, reject) => {
      // SECLEVEL=0 lets this client really offer TLS 1.1, so the refusal is the server's.
      const s = tlsConnect({ host: ip, port: p1, ca: certs.ca.cert, servername: 'a.nb.test', minVersion: 'TLSv1', maxVersion: 'TLSv1.1', ciphers: 'DEFAULT@SECLEVEL=0' }, () => resolve(s.getProtocol()));
      s.on('error', reject);
    })).rejects.toThrow(/alert protocol version/i);
  });

  it('legacy accepts a TLS 1.2 CBC cipher that recommended refuses', async () => {
    const { ip, p1, p2 } = await setup();
    const cbc = 'ECDHE-RSA-AES128-SHA';
    // The server's refusal of the suite (its handshake_failure alert), not a connection failure.
    await expect(handshake(ip, p1, { ciphers: cbc, maxVersion: 'TLSv1.2', servername: 'a.nb.test' })).rejects.toThrow(/alert handshake failure/i);
    expect(await handshake(ip, p2, { ciphers: cbc, maxVersion: 'TLSv1.2', servername: 'b.nb.test' })).toBe(cbc);
    // Both take a forward-secret AEAD cipher.
    expect(await handshake(ip, p1, { ciphers: 'ECDHE-RSA-AES128-GCM-SHA256', maxVersion: 'TLSv1.2', servername: 'a.nb.test' })).toBe('ECDHE-RSA-AES128-GCM-SHA256');
  });

  it('applies a changed certificate (with its CA chain) without rebinding, and keeps open connections', async () => {
    const { ip, p1, engine, nb, c1 } = await setup();
    const held = await new Promise<import('node:tls').TLSSocket>((resolve, reject) => {
      const s = tlsConnect({ host: ip, port: p1, ca: certs.ca.cert, servername: 'a.nb.test' }, () => resolve(s));
      s.on('error', reject);
    });
    const fresh = makeCert(certs.ca, 'renewed.nb.test');
    const chain = fresh.cert + certs.ca.cert;
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...c1, sslCert: chain, sslKey: fresh.key }, nb.configs![1]] }]));
    const r = await httpsGet(`https://${ip}:${p1}/`, { ca: certs.ca.cert, servername: 'renewed.nb.test' });
    expect(r.cert.subject.CN).toBe('renewed.nb.test');
    // The connection opened before the change still works.
    held.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
    const text = await new Promise<string>((resolve) => {
      let t = '';
      held.on('data', (d: Buffer) => (t += d));
      held.on('end', () => resolve(t));
    });
    expect(text).toMatch(/^HTTP\/1\.1 200/);
    expect(new X509Certificate(certs.certA.cert).subject).toContain('a.nb.test');
  });

  it('DH parameters appended to the certificate enable the DHE suites', async () => {
    const { ip, p1, engine, nb, c1 } = await setup();
    const dhe = 'DHE-RSA-AES128-GCM-SHA256';
    await expect(handshake(ip, p1, { ciphers: dhe, maxVersion: 'TLSv1.2', servername: 'a.nb.test' })).rejects.toThrow(/alert handshake failure/i);
    await engine.apply(snapshot(4, [{ ...nb, configs: [{ ...c1, sslCert: certs.certA.cert + makeDhParams() }, nb.configs![1]] }]));
    expect(await handshake(ip, p1, { ciphers: dhe, maxVersion: 'TLSv1.2', servername: 'a.nb.test' })).toBe(dhe);
  });

  it('rejects a snapshot whose key does not match its certificate', async () => {
    const { engine, nb, c1, ip, p1 } = await setup();
    await expect(engine.apply(snapshot(3, [{ ...nb, configs: [{ ...c1, sslKey: certs.certB.key }, nb.configs![1]] }]))).rejects.toThrow(/ssl_key does not match/);
    const r = await httpsGet(`https://${ip}:${p1}/`, { ca: certs.ca.cert, servername: 'a.nb.test' });
    expect(r.cert.subject.CN).toBe('a.nb.test');
  });
});
