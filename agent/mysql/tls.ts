import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
import { mkdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { randomBytes } from 'node:crypto';

const run = promisify(execFile);

export interface ClusterTls {
  caPem: string;
  serverCertPem: string;
  serverKeyPem: string;
  /** The addresses the server certificate names (subjectAltName IPs). */
  ips: string[];
}

/**
 * A per-database CA and one server certificate shared by the database's nodes, made with the
 * openssl CLI (Node cannot sign certificates). The server certificate names every node address
 * and both endpoint addresses, so clients verifying the CA and the address they dialled (the
 * data plane's endpoint passes TLS through untouched) and replicas verifying their primary all succeed.
 * The CA is kept across calls; the server certificate is re-issued when the address set changes.
 * P-256 keys: generating them takes milliseconds, which keeps provisioning fast.
 */
export async function ensureClusterTls(dir: string, databaseId: number, ipsIn: string[]): Promise<ClusterTls> {
  const ips = [...new Set([...ipsIn.filter(Boolean), '127.0.0.1'])].sort();
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ca = join(dir, 'ca.pem');
  const caKey = join(dir, 'ca-key.pem');
  const cert = join(dir, 'server.pem');
  const key = join(dir, 'server-key.pem');
  const ipsFile = join(dir, 'ips.json');
  if (!existsSync(ca) || !existsSync(caKey)) {
    await run('openssl', [
      'req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', caKey, '-out', ca, '-days', '3650', '-subj', `/CN=Fulcrum database ${databaseId} CA`,
      '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
    ]);
  }
  const same = existsSync(cert) && existsSync(ipsFile) && (await readFile(ipsFile, 'utf8')) === JSON.stringify(ips);
  if (!same) {
    const csr = join(dir, 'server.csr');
    const ext = join(dir, 'server.ext');
    await run('openssl', [
      'req', '-new', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes',
      '-keyout', key, '-out', csr, '-subj', `/CN=fulcrum-db-${databaseId}`,
    ]);
    await writeFile(ext, `subjectAltName=${['DNS:localhost', ...ips.map((ip) => `IP:${ip}`)].join(',')}\nextendedKeyUsage=serverAuth,clientAuth\n`);
    await run('openssl', [
      'x509', '-req', '-in', csr, '-CA', ca, '-CAkey', caKey, '-set_serial', `0x${randomBytes(8).toString('hex')}`,
      '-days', '3650', '-out', cert, '-extfile', ext,
    ]);
    await rm(csr, { force: true });
    await writeFile(ipsFile, JSON.stringify(ips));
  }
  return {
    caPem: await readFile(ca, 'utf8'),
    serverCertPem: await readFile(cert, 'utf8'),
    serverKeyPem: await readFile(key, 'utf8'),
    ips,
  };
}

/** A key file for file_key_management: `<id>;<64 hex>`, made once per database and kept. */
export async function ensureKeyFile(dir: string): Promise<string> {
  const file = join(dir, 'keyfile');
  if (!existsSync(file)) {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await writeFile(file, `1;${randomBytes(32).toString('hex')}\n`, { mode: 0o600 });
  }
  return readFile(file, 'utf8');
}

/**
 * Puts a CA made elsewhere (the control plane's, for a cluster spread over agents) where
 * ensureClusterTls looks for it; a different CA than the one there drops the server
 * certificate, so it is issued again under the new CA. Files 0600 in a 0700 folder.
 */
export async function installClusterCa(dir: string, caPem: string, caKeyPem: string): Promise<void> {
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const ca = join(dir, 'ca.pem');
  if (existsSync(ca) && (await readFile(ca, 'utf8')) === caPem) return;
  await writeFile(join(dir, 'ca-key.pem'), caKeyPem, { mode: 0o600 });
  await writeFile(ca, caPem, { mode: 0o600 });
  await rm(join(dir, 'ips.json'), { force: true });
}
