import type { FleetRole } from '../../lib/pki.js';

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

/** The fleet PKI's bookkeeping: join tokens, issued certificates and their revocation. */
export interface FleetRepository {
  addToken(t: JoinTokenRecord): Promise<void>;
  token(id: string): Promise<JoinTokenRecord | undefined>;
  /** Marks the token used; false when it already was (single use, checked in one statement). */
  useToken(id: string, at: number): Promise<boolean>;
  addCert(c: FleetCertRecord): Promise<void>;
  cert(serial: string): Promise<FleetCertRecord | undefined>;
  /** Revokes every certificate of that host; returns how many were live. */
  revokeHost(role: FleetCertRecord['role'], hostId: string, at: number): Promise<number>;
}
