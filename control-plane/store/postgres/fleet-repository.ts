import type { FleetRepository } from '../fleet-repository.js';
import { certRow, tokenRow } from '../sqlite/fleet-repository.js';
import type { PgExecutor } from './executor.js';

/** PostgreSQL adapter of the fleet PKI's bookkeeping; a token is used once, in one statement. */
export function pgFleet(x: PgExecutor): FleetRepository {
  return {
    async addToken(t) {
      await x.query('INSERT INTO fleet_join_tokens (id, secret_hash, role, host_id, region, created, expires, used_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
        [t.id, t.secretHash, t.role, t.hostId, t.region, t.created, t.expires, t.usedAt]);
    },
    async token(id) {
      const r = await x.one('SELECT * FROM fleet_join_tokens WHERE id = $1', [id]);
      return r ? tokenRow(r) : undefined;
    },
    useToken: async (id, at) => (await x.query('UPDATE fleet_join_tokens SET used_at = $1 WHERE id = $2 AND used_at IS NULL', [at, id])).rowCount === 1,
    async addCert(c) {
      await x.query('INSERT INTO fleet_certificates (serial, role, host_id, region, issued_at, not_after, revoked_at) VALUES ($1, $2, $3, $4, $5, $6, $7)',
        [c.serial, c.role, c.hostId, c.region, c.issuedAt, c.notAfter, c.revokedAt]);
    },
    async cert(serial) {
      const r = await x.one('SELECT * FROM fleet_certificates WHERE serial = $1', [serial]);
      return r ? certRow(r) : undefined;
    },
    revokeHost: async (role, hostId, at) =>
      (await x.query('UPDATE fleet_certificates SET revoked_at = $1 WHERE role = $2 AND host_id = $3 AND revoked_at IS NULL', [at, role, hostId])).rowCount ?? 0,
  };
}
