import type { Db } from './database.js';
import type { FleetCertRecord, FleetRepository } from '../../domain/fleet/repository.js';
import { certRow, joinTokenRow, type CertRow, type JoinTokenRow } from '../common/rows.js';
import { CERT_STATE } from '../common/queries.js';
import type { Immediate } from './gate.js';
import { gateOf } from './gate.js';

export const sqliteFleet = (db: Db): FleetRepository => gateOf(db).wrap<FleetRepository>(immediateFleet(db));

function immediateFleet(db: Db): Immediate<FleetRepository> {
  return {
    addToken(t) {
      db.prepare('INSERT INTO fleet_join_tokens (id, secret_hash, role, host_id, region, created, expires, used_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(t.id, t.secretHash, t.role, t.hostId, t.region, t.created, t.expires, t.usedAt);
    },
    token(id) {
      const r = db.prepare<unknown[], JoinTokenRow>('SELECT * FROM fleet_join_tokens WHERE id = ?').get(id);
      return r ? joinTokenRow(r) : undefined;
    },
    useToken(id, at) {
      return db.prepare('UPDATE fleet_join_tokens SET used_at = ? WHERE id = ? AND used_at IS NULL').run(at, id).changes === 1;
    },
    addCert(c) {
      insertCert(db, c);
    },
    cert(serial) {
      const r = db.prepare<unknown[], CertRow>(`${CERT_STATE} WHERE c.serial = ?`).get(serial);
      return r ? certRow(r) : undefined;
    },
    certs(serials) {
      if (serials.length === 0) return [];
      return db.prepare<unknown[], CertRow>(`${CERT_STATE} WHERE c.serial IN (SELECT value FROM json_each(?))`).all(JSON.stringify(serials)).map(certRow);
    },
    redeem(tokenId, at, c) {
      // better-sqlite3 runs this synchronously: nothing interleaves with it in this one process.
      return db.transaction(() => {
        if (db.prepare('UPDATE fleet_join_tokens SET used_at = ? WHERE id = ? AND used_at IS NULL').run(at, tokenId).changes !== 1) return false;
        db.prepare('DELETE FROM fleet_removed_hosts WHERE role = ? AND host_id = ?').run(c.role, c.hostId);
        insertCert(db, c);
        return true;
      })();
    },
    renew(renewing, c, limit) {
      return db.transaction(() => {
        const cur = db.prepare<unknown[], CertRow>(`${CERT_STATE} WHERE c.serial = ?`).get(renewing);
        const rec = cur ? certRow(cur) : undefined;
        if (!rec || rec.revokedAt !== null || rec.hostRemoved || rec.role !== c.role || rec.hostId !== c.hostId) return 'revoked' as const;
        if (countSince(db, c.role, c.hostId, limit.since) >= limit.max) return 'limited' as const;
        insertCert(db, c);
        return 'recorded' as const;
      })();
    },
    issuedSince(role, hostId, since) {
      return countSince(db, role, hostId, since);
    },
    removeHost(role, hostId, at) {
      return db.transaction(() => {
        db.prepare('INSERT INTO fleet_removed_hosts (role, host_id, removed_at) VALUES (?, ?, ?) ON CONFLICT (role, host_id) DO UPDATE SET removed_at = excluded.removed_at')
          .run(role, hostId, at);
        db.prepare('UPDATE fleet_join_tokens SET used_at = ? WHERE role = ? AND host_id = ? AND used_at IS NULL').run(at, role, hostId);
        return db.prepare('UPDATE fleet_certificates SET revoked_at = ? WHERE role = ? AND host_id = ? AND revoked_at IS NULL').run(at, role, hostId).changes;
      })();
    },
    removedAmong(role, hostIds) {
      if (hostIds.length === 0) return [];
      return db.prepare('SELECT host_id FROM fleet_removed_hosts WHERE role = ? AND host_id IN (SELECT value FROM json_each(?))')
        .pluck().all(role, JSON.stringify(hostIds)) as string[];
    },
  };
}

function insertCert(db: Db, c: FleetCertRecord): void {
  db.prepare('INSERT INTO fleet_certificates (serial, role, host_id, region, issued_at, not_after, revoked_at) VALUES (?, ?, ?, ?, ?, ?, ?)')
    .run(c.serial, c.role, c.hostId, c.region, c.issuedAt, c.notAfter, c.revokedAt);
}

function countSince(db: Db, role: string, hostId: string, since: number): number {
  return db.prepare('SELECT COUNT(*) FROM fleet_certificates WHERE role = ? AND host_id = ? AND issued_at >= ?').pluck().get(role, hostId, since) as number;
}
