import type { CipherSuite } from '../config/model.js';

/**
 * TLS 1.2 cipher lists per `cipher_suite` (docs/cipher-suites.md explains the choice).
 * TLS 1.3 suites are not configurable (as on the real service): OpenSSL's defaults apply.
 * Lists are explicit names, not OpenSSL keywords, so what a suite allows does not move with the
 * OpenSSL version.
 */
export const RECOMMENDED_CIPHERS: readonly string[] = Object.freeze([
  'ECDHE-ECDSA-AES128-GCM-SHA256',
  'ECDHE-RSA-AES128-GCM-SHA256',
  'ECDHE-ECDSA-AES256-GCM-SHA384',
  'ECDHE-RSA-AES256-GCM-SHA384',
  'ECDHE-ECDSA-CHACHA20-POLY1305',
  'ECDHE-RSA-CHACHA20-POLY1305',
  'DHE-RSA-AES128-GCM-SHA256',
  'DHE-RSA-AES256-GCM-SHA384',
]);

/** recommended plus the older TLS 1.2 ciphers: CBC modes and static-RSA key exchange. */
const LEGACY_CIPHERS: readonly string[] = Object.freeze([
  ...RECOMMENDED_CIPHERS,
  'ECDHE-ECDSA-AES128-SHA256',
  'ECDHE-RSA-AES128-SHA256',
  'ECDHE-ECDSA-AES256-SHA384',
  'ECDHE-RSA-AES256-SHA384',
  'ECDHE-ECDSA-AES128-SHA',
  'ECDHE-RSA-AES128-SHA',
  'ECDHE-ECDSA-AES256-SHA',
  'ECDHE-RSA-AES256-SHA',
  'DHE-RSA-AES128-SHA256',
  'DHE-RSA-AES256-SHA256',
  'AES128-GCM-SHA256',
  'AES256-GCM-SHA384',
  'AES128-SHA256',
  'AES256-SHA256',
  'AES128-SHA',
  'AES256-SHA',
]);

function cipherList(suite: CipherSuite): string {
  return (suite === 'legacy' ? LEGACY_CIPHERS : RECOMMENDED_CIPHERS).join(':');
}

const DH_BLOCK = /-----BEGIN (?:X9.42 )?DH PARAMETERS-----[\s\S]+?-----END (?:X9.42 )?DH PARAMETERS-----\s*/;

/**
 * The TLS server options of an https config. As on the real service, DH parameters may be
 * appended to the certificate field (a `BEGIN DH PARAMETERS` block); they enable the DHE suites.
 */
export function tlsOptions(cert: string, key: string, suite: CipherSuite): {
  cert: string; key: string; ciphers: string; minVersion: 'TLSv1.2'; honorCipherOrder: true; dhparam?: string;
} {
  const dh = DH_BLOCK.exec(cert);
  return {
    cert: dh ? cert.replace(DH_BLOCK, '') : cert,
    key,
    ciphers: cipherList(suite),
    minVersion: 'TLSv1.2',
    honorCipherOrder: true,
    ...(dh ? { dhparam: dh[0].trim() } : {}),
  };
}
