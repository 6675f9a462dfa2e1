import { randomBytes, X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { identityUri, openssl, type FleetIdentity } from '../../../lib/pki.js';

/** A certificate the CA signed: PEM, its serial (as X509Certificate spells it) and expiry. */
export interface IssuedCert {
  certPem: string;
  serial: string;
  notAfter: number;
}

const DAY_MS = 86_400_000;

/**
 * The control plane's own CA (docs/security/grpc.md), created on first start in
 * `<state>/pki` (folder 0700, key 0600). It signs the data planes' and agents' certificates,
 * with the identity taken from the join token or the renewing certificate, never from the CSR,
 * and the control plane's own server certificate.
 */
export class FleetCa {
  readonly caPem: string;
  private readonly dir: string;

  private constructor(dir: string) {
    this.dir = dir;
    this.caPem = readFileSync(join(dir, 'ca.crt'), 'utf8');
  }

  static open(stateDir: string): FleetCa {
    const dir = join(stateDir, 'pki');
    mkdirSync(dir, { recursive: true, mode: 0o700 });
    chmodSync(dir, 0o700);
    if (!existsSync(join(dir, 'ca.crt')) || !existsSync(join(dir, 'ca.key'))) {
      const key = openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1']);
      const cert = openssl(['req', '-x509', '-new', '-key', '/dev/stdin', '-days', '3650', '-subj', '/CN=Fulcrum fleet CA',
        '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign'], {}, key);
      writeFileSync(join(dir, 'ca.key'), key, { mode: 0o600 });
      chmodSync(join(dir, 'ca.key'), 0o600);
      writeFileSync(join(dir, 'ca.crt'), cert, { mode: 0o600 });
    }
    return new FleetCa(dir);
  }

  /** Signs `csrPem` (its self-signature checked: the requester holds the key) for `identity`. */
  issue(csrPem: string, identity: FleetIdentity, lifetimeMs: number, usage: 'clientAuth' | 'serverAuth' = 'clientAuth'): IssuedCert {
    if (!/^-----BEGIN CERTIFICATE REQUEST-----[\s\S]+-----END CERTIFICATE REQUEST-----\s*$/.test(csrPem.trim() + '\n')) throw new Error('csr must be a PEM certificate request');
    openssl(['req', '-in', 'host.csr', '-verify', '-noout'], { 'host.csr': csrPem });
    const serial = randomBytes(16);
    serial[0]! &= 0x7f; // a positive INTEGER
    const ext = [
      'basicConstraints=critical,CA:FALSE',
      'keyUsage=critical,digitalSignature,keyEncipherment',
      `extendedKeyUsage=${usage}`,
      `subjectAltName=URI:${identityUri(identity)}${usage === 'serverAuth' ? ',DNS:localhost,IP:127.0.0.1' : ''}`,
    ].join('\n');
    // The CA key goes in on stdin: a copy of it in a temporary file on every issuance would be
    // one more place to read it from (docs/security/secrets.md).
    const certPem = openssl(['x509', '-req', '-in', 'host.csr', '-CA', 'ca.crt', '-CAkey', '/dev/stdin', '-set_serial', `0x${serial.toString('hex')}`,
      '-days', String(Math.max(1, Math.round(lifetimeMs / DAY_MS))), '-extfile', 'ext.cnf', '-sha256'],
    { 'host.csr': csrPem, 'ca.crt': this.caPem, 'ext.cnf': `${ext}\n` }, readFileSync(join(this.dir, 'ca.key'), 'utf8'));
    const x = new X509Certificate(certPem);
    return { certPem, serial: x.serialNumber, notAfter: Date.parse(x.validTo) };
  }

  /**
   * The control plane's own key and certificate for the gRPC and bootstrap listeners, made on
   * first start and again when less than a third of its year is left.
   */
  serverPair(): { keyPem: string; certPem: string } {
    const keyFile = join(this.dir, 'server.key');
    const certFile = join(this.dir, 'server.crt');
    if (existsSync(keyFile) && existsSync(certFile)) {
      const certPem = readFileSync(certFile, 'utf8');
      const x = new X509Certificate(certPem);
      if (Date.parse(x.validTo) - Date.now() > 120 * DAY_MS && x.checkIssued(new X509Certificate(this.caPem))) return { keyPem: readFileSync(keyFile, 'utf8'), certPem };
    }
    const keyPem = openssl(['genpkey', '-algorithm', 'EC', '-pkeyopt', 'ec_paramgen_curve:prime256v1']);
    const csr = openssl(['req', '-new', '-key', '/dev/stdin', '-subj', '/CN=fulcrum-control-plane'], {}, keyPem);
    const { certPem } = this.issue(csr, { role: 'control-plane', id: 'control-plane', region: '*' }, 365 * DAY_MS, 'serverAuth');
    writeFileSync(keyFile, keyPem, { mode: 0o600 });
    chmodSync(keyFile, 0o600);
    writeFileSync(certFile, certPem, { mode: 0o600 });
    return { keyPem, certPem };
  }
}
