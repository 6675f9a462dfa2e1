/**
 * A data plane's or agent's side of the fleet PKI (docs/security/grpc.md): joining with a
 * one-time token (a CSR sent to the control plane's bootstrap endpoint, whose CA is pinned by
 * the hash in the token, as `kubeadm join` does), keeping the certificate in `<state>/pki`, and
 * renewing it over the authenticated channel before it expires.
 */
import { request } from 'node:https';
import type { TLSSocket } from 'node:tls';
import { X509Certificate } from 'node:crypto';
import type { Logger } from './logger.js';
import { insecureChannel, mtlsCredentials, type ChannelSecurity } from './grpc.js';
import { controlPlaneAddresses, hostOf, type ControlPlaneTarget } from './control-plane-client.js';
import { caPin, generateKeyAndCsr, hostIdentity, identityOf, loadHostPki, pkiDir, renewAt, saveHostPki, type FleetIdentity, type HostPki } from './pki.js';

/** `fulcrum1.<bootstrap port>.<token id>.<secret>.<CA pin>`: everything a new host needs. */
export interface JoinToken {
  port: number;
  id: string;
  secret: string;
  pin: string;
}

export function formatJoinToken(t: JoinToken): string {
  return `fulcrum1.${t.port}.${t.id}.${t.secret}.${t.pin}`;
}

export function parseJoinToken(s: string): JoinToken {
  const m = /^fulcrum1\.(\d{1,5})\.([0-9a-f]{8,32})\.([0-9a-f]{32,128})\.([0-9a-f]{64})$/.exec(s.trim());
  if (!m) throw new Error('the join token is malformed (expected fulcrum1.<port>.<id>.<secret>.<ca-hash>)');
  return { port: Number(m[1]), id: m[2]!, secret: m[3]!, pin: m[4]! };
}

export const isControlPlaneCert = (raw: Buffer): boolean => identityOf(new X509Certificate(raw))?.role === 'control-plane';

/**
 * Runs `fn` against each replica's host in turn until one answers: every replica serves the
 * bootstrap endpoint on the same port (the one in the join token). A refusal (an HTTP answer)
 * is final; only an unreachable replica moves on to the next.
 */
async function eachReplica<T>(target: ControlPlaneTarget, fn: (host: string) => Promise<T>): Promise<T> {
  let last: unknown;
  for (const address of controlPlaneAddresses(target)) {
    try {
      return await fn(hostOf(address));
    } catch (err) {
      if (err instanceof RefusedError) throw err;
      last = err;
    }
  }
  throw last;
}

/** The bootstrap endpoint answered, and said no. */
class RefusedError extends Error {}

interface CallOptions {
  host: string;
  port: number;
  path: string;
  body?: unknown;
  /** Trust this CA (and require a control-plane certificate); without it, any server is accepted and `onPeer` decides. */
  caPem?: string;
  client?: HostPki;
  onPeer?: (socket: TLSSocket) => void;
}

/** One JSON request to the bootstrap endpoint; a non-2xx answer becomes an Error with its message. */
function call<T>(o: CallOptions): Promise<T> {
  return new Promise((resolve, reject) => {
    const req = request({
      host: o.host, port: o.port, path: o.path, method: o.body === undefined ? 'GET' : 'POST',
      headers: { 'content-type': 'application/json' },
      ca: o.caPem, rejectUnauthorized: o.caPem !== undefined,
      checkServerIdentity: (_h, cert) => (cert.raw && isControlPlaneCert(cert.raw) ? undefined : new Error('the server is not the fleet control plane')),
      cert: o.client?.certPem, key: o.client?.keyPem,
      timeout: 10_000,
    }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      // A connection lost mid-answer (the control plane stopped) ends neither the request nor
      // the answer: without this the call would wait for the rest for good.
      res.on('error', (err) => reject(new Error(`the control plane closed the connection mid-answer (${err.message})`)));
      res.on('data', (c: string) => (text += c));
      res.on('end', () => {
        let json: any;
        try {
          json = JSON.parse(text);
        } catch {
          json = { error: text };
        }
        if ((res.statusCode ?? 500) >= 300) reject(new RefusedError(`control plane refused (${res.statusCode}): ${json?.error ?? text}`));
        else resolve(json as T);
      });
    });
    req.on('socket', (s) => s.once('secureConnect', () => {
      try {
        o.onPeer?.(s as TLSSocket);
      } catch (err) {
        req.destroy(err as Error);
      }
    }));
    req.on('timeout', () => req.destroy(new Error('bootstrap endpoint timed out')));
    req.on('error', reject);
    req.end(o.body === undefined ? undefined : JSON.stringify(o.body));
  });
}

/**
 * Joins the fleet: fetches the CA and accepts it only if its hash is the token's pin, then sends
 * a CSR (the key stays here) with the token over TLS verified against that CA, and stores the
 * certificate it gets. The control plane decides role, id and region from the token alone.
 */
export async function joinFleet(o: { controlPlane: ControlPlaneTarget; token: string; role: 'dataplane' | 'agent'; stateDir: string }): Promise<FleetIdentity> {
  const t = parseJoinToken(o.token);
  const { keyPem, csrPem } = generateKeyAndCsr();
  const { caPem, res } = await eachReplica(o.controlPlane, async (host) => {
    const { caPem } = await call<{ caPem: string }>({ host, port: t.port, path: '/v1/ca' });
    if (caPin(caPem) !== t.pin) throw new RefusedError('the control plane CA does not match the join token (hash mismatch): refusing to join');
    const res = await call<{ certPem: string }>({ host, port: t.port, path: '/v1/join', caPem, body: { token: `${t.id}.${t.secret}`, role: o.role, csr: csrPem } });
    return { caPem, res };
  });
  const pki = { caPem, certPem: res.certPem, keyPem, bootstrapPort: t.port };
  const identity = hostIdentity(pki);
  if (identity.role !== o.role) throw new Error(`the join token is for a ${identity.role}, not a ${o.role}`);
  saveHostPki(o.stateDir, pki);
  return identity;
}

/**
 * Renews a host's certificate over the authenticated channel: a new key and CSR, sent with the
 * current certificate as the client certificate; the control plane answers with a certificate
 * for the same identity (refused once revoked or expired). Stores and returns the new set.
 */
export async function renewCertificate(o: { controlPlane: ControlPlaneTarget; stateDir: string; current: HostPki }): Promise<HostPki> {
  const port = o.current.bootstrapPort;
  if (!port) throw new Error(`no bootstrap port in ${pkiDir(o.stateDir)}; join again to renew`);
  const { keyPem, csrPem } = generateKeyAndCsr();
  const res = await eachReplica(o.controlPlane, (host) => call<{ certPem: string }>({ host, port, path: '/v1/renew', caPem: o.current.caPem, client: o.current, body: { csr: csrPem } }));
  const next = { ...o.current, certPem: res.certPem, keyPem };
  const was = hostIdentity(o.current);
  const now = hostIdentity(next);
  if (was.role !== now.role || was.id !== now.id || was.region !== now.region) throw new Error('the renewed certificate names another identity');
  saveHostPki(o.stateDir, next);
  return next;
}

export interface HostSecurityOptions {
  stateDir: string;
  /** host:port of the control plane's gRPC server, or its replicas (their hosts serve the bootstrap endpoint too). */
  controlPlane: ControlPlaneTarget;
  role: 'dataplane' | 'agent';
  /** A join token: join now (replacing any certificate kept). */
  join?: string;
  /** Plain gRPC, no certificate (only with the operator's explicit --insecure-grpc). */
  insecure?: boolean;
  logger: Logger;
}

export interface HostSecurity extends ChannelSecurity {
  /** The certificate's identity; undefined when insecure. */
  readonly identity: FleetIdentity | undefined;
  /** Called after each renewal (the clients reopen their streams with the new certificate). */
  onRenewed(fn: () => void): void;
  close(): void;
}

/**
 * The channel security of a host process: insecure only when asked, else the certificate kept in
 * `<state>/pki` (after joining with `join` if given), renewed at two thirds of its lifetime.
 */
export async function prepareHostSecurity(o: HostSecurityOptions): Promise<HostSecurity> {
  if (o.insecure) {
    o.logger.warn('gRPC without TLS (--insecure-grpc): anyone on the path can read and forge the control channel');
    return { ...insecureChannel, identity: undefined, onRenewed: () => undefined, close: () => undefined };
  }
  if (o.join) {
    const id = await joinFleet({ controlPlane: o.controlPlane, token: o.join, role: o.role, stateDir: o.stateDir });
    o.logger.info({ identity: id }, 'joined the fleet');
  }
  let pki = loadHostPki(o.stateDir);
  if (!pki) {
    throw new Error(`no certificate in ${pkiDir(o.stateDir)}: start once with --join <token> (fulcrum join-token create, or POST /v4/fulcrum/join-tokens), or pass --insecure-grpc`);
  }
  const identity = hostIdentity(pki);
  if (identity.role !== o.role) throw new Error(`the certificate in ${pkiDir(o.stateDir)} is for a ${identity.role}, not a ${o.role}`);
  let generation = 1;
  let creds = mtlsCredentials(pki, isControlPlaneCert);
  const listeners: (() => void)[] = [];
  let timer: NodeJS.Timeout | undefined;
  let closed = false;

  const schedule = (delayMs: number) => {
    if (closed) return;
    // Real time on purpose: certificate validity is measured by the peer's wall clock.
    timer = setTimeout(() => void renew(), Math.max(1_000, Math.min(delayMs, 2 ** 31 - 1)));
    timer.unref();
  };
  const renew = async () => {
    try {
      pki = await renewCertificate({ controlPlane: o.controlPlane, stateDir: o.stateDir, current: pki! });
      creds = mtlsCredentials(pki, isControlPlaneCert);
      generation++;
      o.logger.info({ validTo: new X509Certificate(pki.certPem).validTo }, 'certificate renewed');
      for (const fn of listeners) fn();
      schedule(renewAt(pki.certPem) - Date.now());
    } catch (err) {
      o.logger.warn({ err }, 'certificate renewal failed; retrying in a minute');
      schedule(60_000);
    }
  };
  schedule(renewAt(pki.certPem) - Date.now());

  return {
    identity,
    credentials: () => creds,
    get generation() {
      return generation;
    },
    onRenewed: (fn) => listeners.push(fn),
    close() {
      closed = true;
      if (timer) clearTimeout(timer);
    },
  };
}

