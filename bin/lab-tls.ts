/**
 * `fulcrum lab --api-tls`: a private CA and a certificate for the API's address, made once with
 * the openssl CLI and kept in the lab's state (docs/security/api.md). Clients trust the CA file,
 * never "insecure" mode.
 */
import { execFileSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { isIpv4 } from '../lib/ipv4.js';

export interface LabTls {
  caFile: string;
  certFile: string;
  keyFile: string;
}

export function ensureLabTls(dir: string, host: string): LabTls {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  const files = { caFile: join(dir, 'ca.crt'), certFile: join(dir, 'api.crt'), keyFile: join(dir, 'api.key') };
  if (Object.values(files).every((f) => existsSync(f))) return files;
  const run = (args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: ['ignore', 'ignore', 'pipe'] });
  run(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.crt', '-days', '825',
    '-subj', '/CN=Fulcrum lab CA', '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign']);
  const names = new Set(['DNS:localhost', 'IP:127.0.0.1', isIpv4(host) ? `IP:${host}` : `DNS:${host}`]);
  writeFileSync(join(dir, 'ext.cnf'), `subjectAltName=${[...names].join(',')}\nbasicConstraints=CA:FALSE\nkeyUsage=digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\n`);
  run(['req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'api.key', '-out', 'api.csr', '-subj', `/CN=${host}`]);
  run(['x509', '-req', '-in', 'api.csr', '-CA', 'ca.crt', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'api.crt', '-days', '825', '-extfile', 'ext.cnf']);
  for (const key of ['ca.key', 'api.key']) chmodSync(join(dir, key), 0o600);
  return files;
}
