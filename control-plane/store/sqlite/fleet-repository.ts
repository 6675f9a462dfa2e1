import type { Db } from './database.js';
import type { FleetCertRecord, FleetRepository, JoinTokenRecord } from '../fleet-repository.js';
import type { Immediate } from '../store.js';
import { gateOf } from './gate.js';

export const tokenRow = (r: any): JoinTokenRecord => ({
  id: r.id, secretHash: r.secret_hash, role: r.role, hostId: r.host_id, region: r.region, created: r.created, expires: r.expires, usedAt: r.used_at,
});
export const certRow = (r: any): FleetCertRecord => ({
  serial: r.serial, role: r.role, hostId: r.host_id, region: r.region, issuedAt: r.issued_at, notAfter: r.not_after, revokedAt: r.revoked_at,
});

export function sqliteFleet(db: Db): FleetRepository {
  return gateOf(db).wrap<FleetRepository>(immediateFleet(db));
}

function immediateFleet(db: Db): Immediate<FleetRepository> {
  return {
    addToken(t) {
      db.prepare('INSERT INTO fleet_join_tokens (id, secret_hash, role, host_id, region, created, expires, used_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(t.id, t.secretHash, t.role, t.hostId, t.region, t.created, t.expires, t.usedAt);
    },
    token(id) {
      const r = db.prepare('SELECT * FROM fleet_join_tokens WHERE id = ?').get(id);
      return r ? tokenRow(r) : undefined;
    },
    useToken(id, at) {
      return db.prepare('UPDATE fleet_join_tokens SET used_at = ? WHERE id = ? AND used_at IS NULL').run(at, id).changes === 1;
    },
    addCert(c) {
      db.prepare('INSERT INTO fleet_certificates (serial, role, host_id, region, issued_at, not_after, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
        .run(c.serial, c.role, c.hostId, c.region, c.issuedAt, c.notAfter, c.revokedAt);
    },
    cert(serial) {
      const r = db.prepare('SELECT * FROM fleet_certificates WHERE serial = ?').get(serial);
      return r ? certRow(r) : undefined;
    },
    revokeHost(role, hostId, at) {
      return db.prepare('UPDATE fleet_certificates SET revoked_at = ? WHERE role = ? AND host_id = ? AND revoked_at IS NULL').run(at, role, hostId).changes;
    },
  };
}
