import { X509Certificate } from 'node:crypto';
import { describe, expect, it } from 'vitest';
import { formatJoinToken, parseJoinToken } from '../../../lib/fleet-host.js';
import { identityOf, identityUri, openssl } from '../../../lib/pki.js';
import { resolveClaim, PeerRefused } from '../../../control-plane/push/peer-auth.js';

function certWithSan(san: string): X509Certificate {
  const key = openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1']);
  return new X509Certificate(openssl(['req', '-x509', '-new', '-key', 'k.pem', '-subj', '/CN=t', '-days', '1', '-addext', `subjectAltName=${san}`], { 'k.pem': key }));
}

describe('fleet identities', () => {
  it('round-trips role, id and region through the certificate URI, region * included', () => {
    for (const id of [{ role: 'dataplane', id: 'dp-1', region: '*' }, { role: 'agent', id: 'a.b_c', region: 'us-east' }] as const) {
      expect(identityOf(certWithSan(`URI:${identityUri(id)}`))).toEqual(id);
    }
  });

  it('finds no identity in a certificate without a fulcrum:// URI', () => {
    expect(identityOf(certWithSan('DNS:example.com'))).toBeUndefined();
    expect(identityOf(certWithSan('URI:https://dataplane/dp-1?region=*'))).toBeUndefined();
    expect(identityOf(certWithSan('URI:fulcrum://root/x?region=*'))).toBeUndefined();
  });

  it('parses join tokens and refuses malformed ones', () => {
    const t = { port: 8082, id: 'a1b2c3d4e5f60708', secret: 'ab'.repeat(24), pin: 'cd'.repeat(32) };
    expect(parseJoinToken(formatJoinToken(t))).toEqual(t);
    expect(() => parseJoinToken('fulcrum1.8082.xyz')).toThrow(/malformed/);
  });

  it('takes the id and region from the certificate, refusing any other claim', () => {
    const peer = { role: 'dataplane' as const, id: 'dp-1', region: 'us-east' };
    expect(resolveClaim(peer, { id: '', region: '' }, { id: 'x', region: '*' })).toEqual({ id: 'dp-1', region: 'us-east' });
    expect(() => resolveClaim(peer, { id: 'dp-2', region: '' }, { id: 'x', region: '*' })).toThrow(PeerRefused);
    expect(() => resolveClaim(peer, { id: 'dp-1', region: '*' }, { id: 'x', region: '*' })).toThrow(PeerRefused);
    // Insecure (no certificate): the claim is all there is.
    expect(resolveClaim(undefined, { id: 'dp-9', region: '' }, { id: 'x', region: '*' })).toEqual({ id: 'dp-9', region: '*' });
  });
});
