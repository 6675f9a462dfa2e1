/**
 * The fleet's certificates as every process sees them (docs/security/grpc.md): the identity a
 * certificate carries, the CA pin a join token holds, keys and CSRs made on the host that will
 * use them, and the files a host keeps in `<state>/pki`. X.509 work is done by the `openssl`
 * command (Node can parse certificates but not make them); it runs only at join, renewal and
 * first start, never per connection.
 */
import { execFileSync } from 'node:child_process';
import { createHash, generateKeyPairSync, X509Certificate } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export type FleetRole = 'dataplane' | 'agent' | 'control-plane';

/** Who a certificate says its holder is: the only role, id and region that peer may claim. */
export interface FleetIdentity {
  role: FleetRole;
  id: string;
  region: string;
}

const SCHEME = 'fulcrum:';

/** `fulcrum://<role>/<id>?region=<region>`, carried as the certificate's URI subjectAltName. */
export function identityUri(i: FleetIdentity): string {
  return `fulcrum://${i.role}/${encodeURIComponent(i.id)}?region=${encodeURIComponent(i.region)}`;
}

/** The identity in a certificate's URI subjectAltName, or undefined when it carries none. */
export function identityOf(cert: X509Certificate): FleetIdentity | undefined {
  for (const part of (cert.subjectAltName ?? '').split(', ')) {
    if (!part.startsWith('URI:')) continue;
    let url: URL;
    try {
      url = new URL(part.slice(4));
    } catch {
      continue;
    }
    if (url.protocol !== SCHEME) continue;
    const role = url.hostname as FleetRole;
    if (role !== 'dataplane' && role !== 'agent' && role !== 'control-plane') continue;
    const id = decodeURIComponent(url.pathname.replace(/^\//, ''));
    const region = url.searchParams.get('region');
    if (!id || region === null || region === '') continue;
    return { role, id, region };
  }
  return undefined;
}

/** The pin a join token carries: sha256 of the CA certificate's DER, hex (as kubeadm's hash). */
export function caPin(caPem: string): string {
  return createHash('sha256').update(new X509Certificate(caPem).raw).digest('hex');
}

/**
 * Runs openssl in a private temporary folder holding `files`; returns stdout. `key`, a private
 * key, is never one of the files: it goes in on stdin, which the arguments name `/dev/stdin`
 * (the CA key was once written to a temporary file on every issuance). Node's stdin for a child
 * is a socket, which openssl cannot open by name, so `cat` passes the key on through a pipe.
 */
export function openssl(args: string[], files: Record<string, string> = {}, key?: string): string {
  // Without files (a host's CSR at join) no folder is made: a process killed during the call
  // (its host stopped while joining) cannot run the finally, and left an empty folder behind.
  const dir = Object.keys(files).length === 0 ? undefined : mkdtempSync(join(tmpdir(), 'fulcrum-pki-'));
  if (dir) chmodSync(dir, 0o700);
  const cwd = dir ?? '/';
  try {
    for (const [name, content] of Object.entries(files)) writeFileSync(join(cwd, name), content, { mode: 0o600 });
    if (key === undefined) return execFileSync('openssl', args, { cwd, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'] });
    return execFileSync('/bin/sh', ['-c', 'cat | exec openssl "$@"', 'openssl', ...args], { cwd, encoding: 'utf8', input: key, stdio: ['pipe', 'pipe', 'pipe'] });
  } catch (err) {
    const stderr = (err as { stderr?: string }).stderr ?? '';
    throw new Error(`openssl ${args[0]} failed: ${stderr.trim() || (err as Error).message}`, { cause: err });
  } finally {
    if (dir) rmSync(dir, { recursive: true, force: true });
  }
}

/** A fresh P-256 key and a CSR for it; the key never leaves the host that made it. */
export function generateKeyAndCsr(): { keyPem: string; csrPem: string } {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const csrPem = openssl(['req', '-new', '-key', '/dev/stdin', '-subj', '/CN=fulcrum-host'], {}, keyPem);
  return { keyPem, csrPem };
}

/** What a data plane or agent keeps in `<state>/pki` (all 0600, the folder 0700). */
export interface HostPki {
  caPem: string;
  certPem: string;
  keyPem: string;
  /** Where the control plane's bootstrap endpoint listens (join and renewal). */
  bootstrapPort?: number;
}

export function pkiDir(stateDir: string): string {
  return join(stateDir, 'pki');
}

export function loadHostPki(stateDir: string): HostPki | undefined {
  const dir = pkiDir(stateDir);
  const files = ['ca.crt', 'host.crt', 'host.key'].map((f) => join(dir, f));
  if (!files.every((f) => existsSync(f))) return undefined;
  const [caPem, certPem, keyPem] = files.map((f) => readFileSync(f, 'utf8')) as [string, string, string];
  const port = existsSync(join(dir, 'bootstrap-port')) ? Number(readFileSync(join(dir, 'bootstrap-port'), 'utf8').trim()) : undefined;
  return { caPem, certPem, keyPem, bootstrapPort: port || undefined };
}

export function saveHostPki(stateDir: string, pki: HostPki): void {
  const dir = pkiDir(stateDir);
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  // Each file is replaced whole (write then rename), so a crash never leaves half a key.
  const files: [string, string][] = [['ca.crt', pki.caPem], ['host.crt', pki.certPem], ['host.key', pki.keyPem]];
  if (pki.bootstrapPort) files.push(['bootstrap-port', `${pki.bootstrapPort}\n`]);
  for (const [name, content] of files) {
    const tmp = join(dir, `${name}.tmp`);
    writeFileSync(tmp, content, { mode: 0o600 });
    chmodSync(tmp, 0o600);
    renameSync(tmp, join(dir, name));
  }
}

/** The identity of a host's own certificate (the id and region it will claim). */
export function hostIdentity(pki: HostPki): FleetIdentity {
  const id = identityOf(new X509Certificate(pki.certPem));
  if (!id) throw new Error('the host certificate carries no fulcrum:// identity');
  return id;
}

/**
 * When a host renews: once two thirds of its certificate's lifetime have passed (as cert-manager
 * and Consul's auto-encrypt do), leaving a third of it to ride out a control plane that is away.
 */
export function renewAt(certPem: string): number {
  const c = new X509Certificate(certPem);
  const from = Date.parse(c.validFrom);
  const to = Date.parse(c.validTo);
  return from + ((to - from) * 2) / 3;
}
