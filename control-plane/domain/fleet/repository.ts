import type { FleetRole } from '../../../lib/pki.js';

/** A one-time join token as stored: only the hash of its secret is kept. */
export interface JoinTokenRecord {
  id: string;
  secretHash: string;
  role: Exclude<FleetRole, 'control-plane'>;
  hostId: string;
  region: string;
  created: number;
  expires: number;
  usedAt: number | null;
}

/** A certificate the fleet CA issued to a data plane or agent. */
export interface FleetCertRecord {
  serial: string;
  role: Exclude<FleetRole, 'control-plane'>;
  hostId: string;
  region: string;
  issuedAt: number;
  notAfter: number;
  revokedAt: number | null;
}

/** A certificate's record with whether its host has been removed since (whatever the certificate). */
export interface FleetCertState extends FleetCertRecord {
  hostRemoved: boolean;
}

/** What a renewal's record came to: recorded, or why not. */
export type RenewOutcome = 'recorded' | 'revoked' | 'limited';

/**
 * The fleet PKI's bookkeeping: join tokens, issued certificates, and the hosts an admin removed.
 * The steps that race a removal (redeeming a token, recording a renewal) are each one
 * transaction with the removal's, so whichever commits second sees the first
 * (docs/security/grpc.md, "Revocation").
 */
export interface FleetRepository {
  addToken(t: JoinTokenRecord): Promise<void>;
  token(id: string): Promise<JoinTokenRecord | undefined>;
  /** Marks the token used; false when it already was (single use, checked in one statement). */
  useToken(id: string, at: number): Promise<boolean>;
  addCert(c: FleetCertRecord): Promise<void>;
  cert(serial: string): Promise<FleetCertState | undefined>;
  /** The records of these serials (unknown ones are left out). */
  certs(serials: string[]): Promise<FleetCertState[]>;
  /**
   * In one transaction: marks the token used (false, and nothing else, when it already was or a
   * removal used it up), clears the host's removed mark (a token redeemed after a removal is the
   * admin bringing the host back) and records `c`.
   */
  redeem(tokenId: string, at: number, c: FleetCertRecord): Promise<boolean>;
  /**
   * In one transaction: records `c` only when the certificate `renewing` is recorded, unrevoked
   * and its host not removed ('revoked' otherwise), and fewer than `limit.max` certificates of
   * that host were issued at or after `limit.since` ('limited' otherwise).
   */
  renew(renewing: string, c: FleetCertRecord, limit: { since: number; max: number }): Promise<RenewOutcome>;
  /** How many certificates of that host were issued at or after `since`. */
  issuedSince(role: FleetCertRecord['role'], hostId: string, since: number): Promise<number>;
  /**
   * In one transaction: marks the host removed, revokes every certificate of it, and uses up its
   * unused join tokens (made before the removal, they must not bring it back). Returns how many
   * certificates were live.
   */
  removeHost(role: FleetCertRecord['role'], hostId: string, at: number): Promise<number>;
  /** Which of these hosts are marked removed. */
  removedAmong(role: FleetCertRecord['role'], hostIds: string[]): Promise<string[]>;
}
