import type { FleetIdentity } from '../../lib/pki.js';
import { grpc } from '../../lib/grpc.js';
import { PeerRefused, type FleetService, type HostRole, type PeerIdentity } from '../domain/fleet/fleet-service.js';

type AuthCall = { getAuthContext(): { sslPeerCertificate?: { raw?: Buffer } } | null };

/**
 * Who is at the other end of a gRPC stream (docs/security/grpc.md). With mTLS, the verified
 * client certificate is the only source of the id and region a peer may use; with
 * --insecure-grpc there is no proof and the peer's own claim is taken, as before.
 */
export interface PeerAuth {
  /** The certificate's identity (and serial) for `role`; throws PeerRefused. Undefined when insecure. */
  identify(call: AuthCall, role: HostRole): Promise<PeerIdentity | undefined>;
}

export const insecurePeers: PeerAuth = { identify: async () => undefined };

export function certificatePeers(fleet: FleetService): PeerAuth {
  return { identify: (call, role) => fleet.verifyPeer(call.getAuthContext()?.sslPeerCertificate?.raw, role) };
}

/**
 * The id and region a stream runs as: the certificate's, refusing a message that claims another
 * (an empty claim means "mine"); without a certificate (insecure), the claim or `fallback`.
 */
export function resolveClaim(peer: FleetIdentity | undefined, claimed: { id: string; region: string }, fallback: { id: string; region: string }): { id: string; region: string } {
  if (!peer) return { id: claimed.id || fallback.id, region: claimed.region || fallback.region };
  if (claimed.id && claimed.id !== peer.id) throw new PeerRefused(`the certificate is for ${peer.id}, not ${claimed.id}`);
  if (claimed.region && claimed.region !== peer.region) throw new PeerRefused(`the certificate is for region ${peer.region}, not ${claimed.region}`);
  return { id: peer.id, region: peer.region };
}

/** Ends a server stream with PERMISSION_DENIED and the reason. */
export function refuse(call: { emit(event: 'error', err: unknown): unknown }, err: unknown): void {
  const details = err instanceof PeerRefused ? err.message : 'refused';
  call.emit('error', { code: grpc.status.PERMISSION_DENIED, details });
}

export { PeerRefused };
