import { createHash, randomBytes, timingSafeEqual, X509Certificate } from 'node:crypto';
import { ErrorCollector } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import { caPin, identityOf, type FleetIdentity } from '../../../lib/pki.js';
import { formatJoinToken } from '../../../lib/fleet-host.js';
import type { FleetRepository } from '../../store/fleet-repository.js';
import type { RegionCatalogue } from '../regions.js';
import type { FleetCa, IssuedCert } from './ca.js';
import { fleetReasons as R } from './validation.js';

export type HostRole = 'dataplane' | 'agent';

const DAY_MS = 86_400_000;
const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export interface FleetServiceDeps {
  repo: FleetRepository;
  ca: FleetCa;
  regions: RegionCatalogue;
  clock: Clock;
  /** Where the bootstrap endpoint listens; written into every join token. */
  bootstrapPort: () => number;
  /** Lifetime of a host certificate (default 30 days; hosts renew at two thirds). */
  certLifetimeMs?: number;
}

/** Why a peer was refused; the push servers answer it as PERMISSION_DENIED. */
export class PeerRefused extends Error {}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * The fleet PKI's rules (docs/security/grpc.md): one-time join tokens bound to one role, id and
 * region; certificates issued for exactly what the token (or the renewing certificate) says;
 * the check every gRPC stream makes of its peer's certificate; revocation when an admin
 * removes a data plane or agent, which also closes its open streams.
 */
export class FleetService {
  private readonly revokeListeners: ((role: HostRole, id: string) => Promise<void> | void)[] = [];
  private readonly lifetimeMs: number;

  constructor(private readonly d: FleetServiceDeps) {
    this.lifetimeMs = d.certLifetimeMs ?? 30 * DAY_MS;
  }

  get caPem(): string {
    return this.d.ca.caPem;
  }

  /** A join token for one host, valid once and until `expiry_seconds` (default one hour) pass. */
  async createJoinToken(body: unknown): Promise<{ token: string; role: HostRole; id: string; region: string; expires: number }> {
    const b = (typeof body === 'object' && body !== null ? body : {}) as Record<string, unknown>;
    const errs = new ErrorCollector();
    if (b.role !== 'dataplane' && b.role !== 'agent') errs.add('role', R.role);
    if (typeof b.id !== 'string' || !ID.test(b.id)) errs.add('id', R.id);
    const region = b.region ?? '*';
    if (typeof region !== 'string' || (region !== '*' && !this.d.regions.get(region))) errs.add('region', R.region);
    const ttl = b.expiry_seconds ?? 3600;
    if (typeof ttl !== 'number' || !Number.isInteger(ttl) || ttl < 60 || ttl > 604_800) errs.add('expiry_seconds', R.expiry);
    errs.throwIfAny();
    const id = randomBytes(8).toString('hex');
    const secret = randomBytes(24).toString('hex');
    const now = this.d.clock.now();
    const rec = { id, secretHash: sha256(secret), role: b.role as HostRole, hostId: b.id as string, region: region as string, created: now, expires: now + (ttl as number) * 1000, usedAt: null };
    await this.d.repo.addToken(rec);
    return {
      token: formatJoinToken({ port: this.d.bootstrapPort(), id, secret, pin: caPin(this.d.ca.caPem) }),
      role: rec.role, id: rec.hostId, region: rec.region, expires: rec.expires,
    };
  }

  /** Redeems `<id>.<secret>` once for a certificate carrying the token's identity. */
  async join(token: string, role: unknown, csrPem: unknown): Promise<IssuedCert> {
    const [id = '', secret = ''] = String(token).split('.');
    const rec = await this.d.repo.token(id);
    const now = this.d.clock.now();
    const ok = rec !== undefined && timingSafeEqual(Buffer.from(rec.secretHash), Buffer.from(sha256(secret)));
    if (!rec || !ok) throw new PeerRefused('unknown join token');
    if (rec.usedAt !== null) throw new PeerRefused('join token already used');
    if (rec.expires <= now) throw new PeerRefused('join token expired');
    if (role !== rec.role) throw new PeerRefused(`join token is for a ${rec.role}`);
    if (typeof csrPem !== 'string') throw new PeerRefused('csr is required');
    const identity = { role: rec.role, id: rec.hostId, region: rec.region };
    const issued = this.issueChecked(csrPem, identity);
    if (!(await this.d.repo.useToken(id, now))) throw new PeerRefused('join token already used');
    await this.record(issued, identity);
    return issued;
  }

  /** A new certificate for the same identity, asked for with the current one (still valid, not revoked). */
  async renew(peerCertRaw: Buffer | undefined, csrPem: unknown): Promise<IssuedCert> {
    const identity = await this.verifyPeer(peerCertRaw);
    if (identity.role === 'control-plane') throw new PeerRefused('not a host certificate');
    if (typeof csrPem !== 'string') throw new PeerRefused('csr is required');
    const issued = this.issueChecked(csrPem, identity);
    await this.record(issued, identity);
    return issued;
  }

  /**
   * The identity a peer's certificate proves, refused when there is no certificate, when this CA
   * did not record issuing it, when it was revoked or has expired, or (with `role`) when it is
   * for another role: a data plane's certificate cannot open an agent's stream.
   */
  async verifyPeer(peerCertRaw: Buffer | undefined, role?: HostRole): Promise<FleetIdentity> {
    if (!peerCertRaw) throw new PeerRefused('a client certificate is required');
    const cert = new X509Certificate(peerCertRaw);
    const identity = identityOf(cert);
    if (!identity || !cert.checkIssued(new X509Certificate(this.d.ca.caPem))) throw new PeerRefused('certificate not issued by the fleet CA');
    if (role && identity.role !== role) throw new PeerRefused(`a ${identity.role} certificate cannot open the ${role} stream`);
    const rec = await this.d.repo.cert(cert.serialNumber);
    if (!rec || rec.role !== identity.role || rec.hostId !== identity.id || rec.region !== identity.region) throw new PeerRefused('unknown certificate');
    if (rec.revokedAt !== null) throw new PeerRefused(`the certificate of ${identity.role} ${identity.id} was revoked`);
    if (rec.notAfter <= this.d.clock.now()) throw new PeerRefused('certificate expired');
    return identity;
  }

  /** Revokes every certificate of that host and closes its open streams; returns how many were live. */
  async revoke(role: HostRole, id: string): Promise<number> {
    const n = await this.d.repo.revokeHost(role, id, this.d.clock.now());
    for (const fn of this.revokeListeners) await fn(role, id);
    return n;
  }

  onRevoke(fn: (role: HostRole, id: string) => Promise<void> | void): void {
    this.revokeListeners.push(fn);
  }

  private issueChecked(csrPem: string, identity: FleetIdentity): IssuedCert {
    try {
      return this.d.ca.issue(csrPem, identity, this.lifetimeMs);
    } catch (err) {
      throw new PeerRefused(`csr refused: ${(err as Error).message.split('\n')[0]}`);
    }
  }

  private record(issued: IssuedCert, identity: FleetIdentity): Promise<void> {
    return this.d.repo.addCert({
      serial: issued.serial, role: identity.role as HostRole, hostId: identity.id, region: identity.region,
      issuedAt: this.d.clock.now(), notAfter: issued.notAfter, revokedAt: null,
    });
  }
}
