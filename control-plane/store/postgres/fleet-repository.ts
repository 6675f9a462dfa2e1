import type { FleetCertRecord, FleetRepository } from '../../domain/fleet/repository.js';
import { certRow, joinTokenRow, type CertRow, type JoinTokenRow } from '../common/rows.js';
import { CERT_STATE } from '../common/queries.js';
import { pgSql, type PgExecutor } from './executor.js';

/**
 * PostgreSQL adapter of the fleet PKI's bookkeeping; a token is used once, in one statement.
 * Redeeming, renewing and removing are SERIALIZABLE transactions (PgExecutor): a renewal that
 * read the certificate unrevoked and a removal that revoked the host's certificates cannot both
 * commit, the one PostgreSQL refuses is run again and then sees the other's outcome.
 */
export function pgFleet(x: PgExecutor): FleetRepository {
  const insertCert = (c: FleetCertRecord) => x.query('INSERT INTO fleet_certificates (serial, role, host_id, region, issued_at, not_after, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)',
    [c.serial, c.role, c.hostId, c.region, c.issuedAt, c.notAfter, c.revokedAt]);
  const countSince = async (role: string, hostId: string, since: number) =>
    Number((await x.one<{ n: number }>('SELECT COUNT(*) AS n FROM fleet_certificates WHERE role = $1 AND host_id = $2 AND issued_at >= $3', [role, hostId, since]))?.n ?? 0);
  const certState = async (serial: string) => {
    const r = await x.one<CertRow>(pgSql(`${CERT_STATE} WHERE c.serial = ?`), [serial]);
    return r ? certRow(r) : undefined;
  };
  return {
    async addToken(t) {
      await x.query('INSERT INTO fleet_join_tokens (id, secret_hash, role, host_id, region, created, expires, used_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
        [t.id, t.secretHash, t.role, t.hostId, t.region, t.created, t.expires, t.usedAt]);
    },
    async token(id) {
      const r = await x.one<JoinTokenRow>('SELECT * FROM fleet_join_tokens WHERE id = $1', [id]);
      return r ? joinTokenRow(r) : undefined;
    },
    useToken: async (id, at) => (await x.query('UPDATE fleet_join_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL', [at, id])).rowCount === 1,
    async addCert(c) {
      await insertCert(c);
    },
    cert: certState,
    async certs(serials) {
      if (serials.length === 0) return [];
      return (await x.rows<CertRow>(pgSql(`${CERT_STATE} WHERE c.serial = ANY(?)`), [serials])).map(certRow);
    },
    redeem: (tokenId, at, c) => x.transaction(async () => {
      if ((await x.query('UPDATE fleet_join_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL', [at, tokenId])).rowCount !== 1) return false;
      await x.query('DELETE FROM fleet_removed_hosts WHERE role = $1 AND host_id = $2', [c.role, c.hostId]);
      await insertCert(c);
      return true;
    }),
    renew: (renewing, c, limit) => x.transaction(async () => {
      const rec = await certState(renewing);
      if (!rec || rec.revokedAt !== null || rec.hostRemoved || rec.role !== c.role || rec.hostId !== c.hostId) return 'revoked' as const;
      if (await countSince(c.role, c.hostId, limit.since) >= limit.max) return 'limited' as const;
      await insertCert(c);
      return 'recorded' as const;
    }),
    issuedSince: countSince,
    removeHost: (role, hostId, at) => x.transaction(async () => {
      await x.query('INSERT INTO fleet_removed_hosts (role, host_id, removed_at) VALUES ($1, $2, $3) ON CONFLICT (role, host_id) DO UPDATE SET removed_at = EXCLUDED.removed_at',
        [role, hostId, at]);
      await x.query('UPDATE fleet_join_tokens SET used_at = $1 WHERE role = $2 AND host_id = $3 AND used_at IS NULL', [at, role, hostId]);
      return (await x.query('UPDATE fleet_certificates SET revoked_at = $1 WHERE role = $2 AND host_id = $3 AND revoked_at IS NULL', [at, role, hostId])).rowCount ?? 0;
    }),
    async removedAmong(role, hostIds) {
      if (hostIds.length === 0) return [];
      return (await x.rows<{ host_id: string }>('SELECT host_id FROM fleet_removed_hosts WHERE role = $1 AND host_id = ANY($2)', [role, hostIds])).map((r) => r.host_id);
    },
  };
}
