import { execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/**
 * Test PKI with the openssl CLI: a CA and RSA leaf certificates it signs, as PEM strings.
 * RSA because NodeBalancers accept RSA certificates only.
 */
export interface Pem {
  cert: string;
  key: string;
}

function withDir<T>(fn: (dir: string) => T): T {
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-certs-'));
  try {
    return fn(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function openssl(dir: string, args: string[]): void {
  execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
}

export function makeCa(cn = 'Fulcrum Test CA'): Pem {
  return withDir((dir) => {
    openssl(dir, ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '2',
      '-subj', `/CN=${cn}`, '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
    return { cert: readFileSync(join(dir, 'ca.crt'), 'utf8'), key: readFileSync(join(dir, 'ca.key'), 'utf8') };
  });
}

/** A leaf for `cn` (also its DNS/IP subjectAltName) signed by `ca`. */
export function makeCert(ca: Pem, cn: string, opts: { days?: number } = {}): Pem {
  return withDir((dir) => {
    writeFileSync(join(dir, 'ca.crt'), ca.cert);
    writeFileSync(join(dir, 'ca.key'), ca.key, { mode: 0o600 });
    const san = /^\d+\.\d+\.\d+\.\d+$/.test(cn) ? `IP:${cn}` : `DNS:${cn}`;
    writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${san}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n`);
    openssl(dir, ['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'leaf.key', '-out', 'leaf.csr', '-subj', `/CN=${cn}`]);
    openssl(dir, ['x509', '-req', '-in', 'leaf.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'leaf.crt',
      '-days', String(opts.days ?? 2), '-extfile', 'ext.cnf']);
    return { cert: readFileSync(join(dir, 'leaf.crt'), 'utf8'), key: readFileSync(join(dir, 'leaf.key'), 'utf8') };
  });
}

/** DH parameters (the RFC 7919 ffdhe2048 group) as a `BEGIN DH PARAMETERS` PEM block. */
export function makeDhParams(): string {
  return withDir((dir) => {
    openssl(dir, ['genpkey', '-genparam', '-algorithm', 'DH', '-pkeyopt', 'group:ffdhe2048', '-out', 'dh.pem']);
    return readFileSync(join(dir, 'dh.pem'), 'utf8');
  });
}
