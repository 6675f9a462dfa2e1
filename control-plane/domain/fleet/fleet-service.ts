import { createHash, randomBytes, timingSafeEqual, X509Certificate } from 'node:crypto';
import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import { caPin, identityOf, type FleetIdentity } from '../../../lib/pki.js';
import { formatJoinToken } from '../../../lib/fleet-host.js';
import type { FleetCertRecord, FleetRepository } from './repository.js';
import type { RegionCatalogue } from '../regions.js';
import type { FleetCa, IssuedCert } from './ca.js';
import { fleetReasons as R } from './validation.js';

export type HostRole = 'dataplane' | 'agent';

const DAY_MS = 86_400_000;
const HOUR_MS = 3_600_000;
/**
 * Certificates one host may be issued per hour, its join included. A host renews once every
 * twenty days; more than this is a stolen key minting spares, or a loop.
 */
export const CERTS_PER_HOST_PER_HOUR = 5;
/**
 * How often every replica re-checks the certificates of the streams it holds (and the data planes
 * whose addresses it trusts) against the store: the bound on how long a removed host keeps a
 * stream on a replica that missed the removal's notification.
 */
export const REVOCATION_RECHECK_MS = 5_000;
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
  /**
   * Tells the other control-plane replicas that a host was removed, so that they close its
   * streams too (they call `heardRemoval`). Nobody to tell with one control plane.
   */
  announceRemoval?: (role: HostRole, id: string) => void;
}

/** Why a peer was refused; the push servers answer it as PERMISSION_DENIED. */
export class PeerRefused extends Error {}

/** A renewal refused for the host's hourly limit; the bootstrap endpoint answers 429. */
export class RenewalLimited extends PeerRefused {}

/** The identity a verified peer certificate proves, and that certificate's serial. */
export interface PeerIdentity extends FleetIdentity {
  serial: string;
}

const sha256 = (s: string) => createHash('sha256').update(s).digest('hex');

/**
 * The fleet PKI's rules (docs/security/grpc.md): one-time join tokens bound to one role, id and
 * region; certificates issued for exactly what the token (or the renewing certificate) says;
 * the check every gRPC stream makes of its peer's certificate; removal of a data plane or agent
 * by an admin, which revokes its certificates and closes its open streams on every replica
 * (the listeners run here for a local removal, for one heard from another replica, and for
 * removed hosts a periodic re-check finds; docs/security/grpc.md, "Revocation").
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
    // One transaction with the token's use: a removal of this host committed first has used it up.
    if (!(await this.d.repo.redeem(id, now, this.certRecord(issued, identity)))) throw new PeerRefused('join token already used');
    return issued;
  }

  /**
   * A new certificate for the same identity, asked for with the current one (still valid, not
   * revoked, its host not removed), at most CERTS_PER_HOST_PER_HOUR an hour. The checks are made
   * again in the transaction that records it: a removal committed meanwhile wins.
   */
  async renew(peerCertRaw: Buffer | undefined, csrPem: unknown): Promise<IssuedCert> {
    const peer = await this.verifyPeer(peerCertRaw);
    if (peer.role === 'control-plane') throw new PeerRefused('not a host certificate');
    if (typeof csrPem !== 'string') throw new PeerRefused('csr is required');
    const identity = { role: peer.role, id: peer.id, region: peer.region };
    const limit = { since: this.d.clock.now() - HOUR_MS, max: CERTS_PER_HOST_PER_HOUR };
    // Checked before signing too, so that a flood costs no openssl run.
    if (await this.d.repo.issuedSince(peer.role, peer.id, limit.since) >= limit.max) throw this.limited(peer);
    const issued = this.issueChecked(csrPem, identity);
    const outcome = await this.d.repo.renew(peer.serial, this.certRecord(issued, identity), limit);
    if (outcome === 'revoked') throw new PeerRefused(`the certificate of ${peer.role} ${peer.id} was revoked`);
    if (outcome === 'limited') throw this.limited(peer);
    return issued;
  }

  /**
   * The identity a peer's certificate proves, refused when there is no certificate, when this CA
   * did not record issuing it, when it was revoked or has expired, or (with `role`) when it is
   * for another role: a data plane's certificate cannot open an agent's stream.
   */
  async verifyPeer(peerCertRaw: Buffer | undefined, role?: HostRole): Promise<PeerIdentity> {
    if (!peerCertRaw) throw new PeerRefused('a client certificate is required');
    const cert = new X509Certificate(peerCertRaw);
    const identity = identityOf(cert);
    if (!identity || !cert.checkIssued(new X509Certificate(this.d.ca.caPem))) throw new PeerRefused('certificate not issued by the fleet CA');
    if (role && identity.role !== role) throw new PeerRefused(`a ${identity.role} certificate cannot open the ${role} stream`);
    const rec = await this.d.repo.cert(cert.serialNumber);
    if (!rec || rec.role !== identity.role || rec.hostId !== identity.id || rec.region !== identity.region) throw new PeerRefused('unknown certificate');
    if (rec.revokedAt !== null || rec.hostRemoved) throw new PeerRefused(`the certificate of ${identity.role} ${identity.id} was revoked`);
    if (rec.notAfter <= this.d.clock.now()) throw new PeerRefused('certificate expired');
    return { ...identity, serial: cert.serialNumber };
  }

  /**
   * Removes a host: marks it removed, revokes every certificate of it and uses up its unused
   * join tokens (one transaction), then closes its streams on this replica and tells the
   * others. Returns how many certificates were live.
   */
  async revoke(role: HostRole, id: string): Promise<number> {
    // The id travels in the replicas' notification: only ids a join token could name.
    if (!ID.test(id)) throw FulcrumError.field('id', R.id);
    const n = await this.d.repo.removeHost(role, id, this.d.clock.now());
    this.d.announceRemoval?.(role, id);
    await this.removed(role, id);
    return n;
  }

  /** Another replica removed this host: close its streams here too. */
  heardRemoval(role: HostRole, id: string): Promise<void> {
    return this.removed(role, id);
  }

  /**
   * The serials among `serials` (certificates of open streams) that are no longer admitted:
   * unknown, revoked, expired, or of a removed host. The periodic re-check behind the
   * notification, which a replica may miss (its listener reconnecting).
   */
  async refusedAmong(serials: string[]): Promise<Set<string>> {
    const now = this.d.clock.now();
    const admitted = new Set((await this.d.repo.certs(serials)).filter((c) => c.revokedAt === null && !c.hostRemoved && c.notAfter > now).map((c) => c.serial));
    return new Set(serials.filter((s) => !admitted.has(s)));
  }

  /** Which of these hosts were removed (and not brought back with a new join token). */
  removedAmong(role: HostRole, ids: string[]): Promise<string[]> {
    return this.d.repo.removedAmong(role, ids);
  }

  onRevoke(fn: (role: HostRole, id: string) => Promise<void> | void): void {
    this.revokeListeners.push(fn);
  }

  private async removed(role: HostRole, id: string): Promise<void> {
    for (const fn of this.revokeListeners) await fn(role, id);
  }

  private limited(peer: PeerIdentity): RenewalLimited {
    return new RenewalLimited(`${peer.role} ${peer.id} was issued ${CERTS_PER_HOST_PER_HOUR} certificates in the last hour; try later`);
  }

  private issueChecked(csrPem: string, identity: FleetIdentity): IssuedCert {
    try {
      return this.d.ca.issue(csrPem, identity, this.lifetimeMs);
    } catch (err) {
      throw new PeerRefused(`csr refused: ${(err as Error).message.split('\n')[0]}`);
    }
  }

  private certRecord(issued: IssuedCert, identity: FleetIdentity): FleetCertRecord {
    return {
      serial: issued.serial, role: identity.role as HostRole, hostId: identity.id, region: identity.region,
      issuedAt: this.d.clock.now(), notAfter: issued.notAfter, revokedAt: null,
    };
  }
}
