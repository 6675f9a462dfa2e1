import type { Db } from './database.js';
import { parseCidr } from '../../../lib/ipv4.js';
import { formatIpv6, parseIpv6, parseIpv6Cidr } from '../../../lib/ipv6.js';
import type { AddressRepository, KeyValueRepository, ReplicaRepository } from '../../domain/ports.js';
import type { DataplaneRepository } from '../../domain/nodebalancers/repository.js';
import type { EventRepository } from '../../domain/events/repository.js';
import type { TokenRepository, UserRepository } from '../../domain/auth/repository.js';
import type { Immediate } from './gate.js';
import { gateOf } from './gate.js';
import { isSqliteUniqueViolation } from '../unique-violation.js';
import { UniqueViolation } from '../../domain/ports.js';
import { dataplaneRow, eventRow, tokenRow, userRow, type DataplaneRow, type EventRow, type TokenRow, type UserRow } from '../common/rows.js';
import { eventPatchColumns, eventScopeWhere, ipv4Candidates, ipv6Candidates, type SequenceName } from '../common/queries.js';

/**
 * The next id of a table whose ids must never be reused (migrations 102 and 240): one more than
 * both the highest id ever issued and the highest id present. Call inside the inserting transaction,
 * an immediate one: a deferred transaction that has read here cannot wait for another process's
 * write (`fulcrum kek rotate`) and fails at once with `database is locked`
 * (docs/security/secrets.md, "Rotation").
 */
export function nextSequenceId(db: Db, name: SequenceName): number {
  const last = (db.prepare('SELECT last FROM id_sequences WHERE name = ?').pluck().get(name) as number | undefined) ?? 0;
  const max = db.prepare(`SELECT COALESCE(MAX(id), 0) FROM ${name}`).pluck().get() as number;
  const id = Math.max(last, max) + 1;
  db.prepare('INSERT INTO id_sequences (name, last) VALUES (?, ?) ON CONFLICT(name) DO UPDATE SET last = excluded.last').run(name, id);
  return id;
}

/** Runs a write that may take a username, reporting a taken one as the field's UniqueViolation. */
function claimingUsername<T>(write: () => T): T {
  try {
    return write();
  } catch (err) {
    if (isSqliteUniqueViolation(err, 'users.username')) throw new UniqueViolation('username', { cause: err });
    throw err;
  }
}

export const sqliteUsers = (db: Db): UserRepository => gateOf(db).wrap<UserRepository>(immediateUsers(db));

function immediateUsers(db: Db): Immediate<UserRepository> {
  const read = (sql: string) => db.prepare<unknown[], UserRow>(sql);
  return {
    get: (id) => userRow(read('SELECT * FROM users WHERE id = ?').get(id)),
    byUsername: (u) => userRow(read('SELECT * FROM users WHERE username = ?').get(u)),
    create(u) {
      const info = claimingUsername(() => db
        .prepare('INSERT INTO users (username, email, restricted, grants) VALUES (?, ?, ?, ?)')
        .run(u.username, u.email, u.restricted ? 1 : 0, JSON.stringify(u.grants)));
      return { ...u, id: Number(info.lastInsertRowid), timezone: 'UTC' };
    },
    changeGrants: (id, change) => db.transaction(() => {
      const u = userRow(read('SELECT * FROM users WHERE id = ?').get(id));
      if (!u) return undefined;
      change(u.grants);
      db.prepare('UPDATE users SET grants = ? WHERE id = ?').run(JSON.stringify(u.grants), id);
      return u.grants;
    }).immediate(),
    count: () => db.prepare('SELECT COUNT(*) FROM users').pluck().get() as number,
    list: () => read('SELECT * FROM users ORDER BY id').all().map((r) => userRow(r)!),
    update(id, p) {
      if (p.username !== undefined) claimingUsername(() => db.prepare('UPDATE users SET username = ? WHERE id = ?').run(p.username, id));
      if (p.email !== undefined) db.prepare('UPDATE users SET email = ? WHERE id = ?').run(p.email, id);
      if (p.restricted !== undefined) db.prepare('UPDATE users SET restricted = ? WHERE id = ?').run(p.restricted ? 1 : 0, id);
      if (p.timezone !== undefined) db.prepare('UPDATE users SET timezone = ? WHERE id = ?').run(p.timezone, id);
    },
    preferences: (id) => db.prepare('SELECT preferences FROM users WHERE id = ?').pluck().get(id) as string | undefined,
    setPreferences: (id, json) => void db.prepare('UPDATE users SET preferences = ? WHERE id = ?').run(json, id),
    delete: (id) => void db.prepare('DELETE FROM users WHERE id = ?').run(id),
  };
}

export const sqliteTokens = (db: Db): TokenRepository => gateOf(db).wrap<TokenRepository>(immediateTokens(db));

function immediateTokens(db: Db): Immediate<TokenRepository> {
  const read = (sql: string) => db.prepare<unknown[], TokenRow>(sql);
  return {
    byHash: (h) => tokenRow(read('SELECT * FROM tokens WHERE token_hash = ?').get(h)),
    get: (id) => tokenRow(read('SELECT * FROM tokens WHERE id = ?').get(id)),
    listByUser: (uid) => read('SELECT * FROM tokens WHERE user_id = ? ORDER BY id').all(uid).map((r) => tokenRow(r)!),
    create(t) {
      const id = db.transaction(() => {
        const next = nextSequenceId(db, 'tokens');
        db.prepare('INSERT INTO tokens (id, user_id, label, scopes, token_hash, token_prefix, created, expiry) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
          .run(next, t.userId, t.label, t.scopes, t.tokenHash, t.tokenPrefix, t.created, t.expiry);
        return next;
      }).immediate();
      return { id, userId: t.userId, label: t.label, scopes: t.scopes, tokenPrefix: t.tokenPrefix, created: t.created, expiry: t.expiry };
    },
    update(id, patch) {
      if (patch.label !== undefined) db.prepare('UPDATE tokens SET label = ? WHERE id = ?').run(patch.label, id);
    },
    delete: (id) => void db.prepare('DELETE FROM tokens WHERE id = ?').run(id),
  };
}

export const sqliteEvents = (db: Db): EventRepository => gateOf(db).wrap<EventRepository>(immediateEvents(db));

function immediateEvents(db: Db): Immediate<EventRepository> {
  const read = (sql: string) => db.prepare<unknown[], EventRow>(sql);
  return {
    create(e) {
      const info = db
        .prepare(
          `INSERT INTO events (created, action, username, entity_id, entity_type, entity_label, entity_url, secondary_entity, hosts,
             status, percent_complete, duration, message, seen, read) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)`,
        )
        .run(
          e.created, e.action, e.username, e.entity?.id ?? null, e.entity?.type ?? null, e.entity?.label ?? null,
          e.entity?.url ?? null, e.secondaryEntity ? JSON.stringify(e.secondaryEntity) : null, e.hosts?.length ? JSON.stringify(e.hosts) : null, e.status,
          e.percentComplete, e.duration, e.message, e.seen ? 1 : 0, e.read ? 1 : 0,
        );
      return { ...e, id: Number(info.lastInsertRowid) };
    },
    get: (id) => eventRow(read('SELECT * FROM events WHERE id = ?').get(id)),
    update(id, p) {
      const cols = eventPatchColumns(p);
      if (cols.length === 0) return;
      db.prepare(`UPDATE events SET ${cols.map(([c]) => `${c} = ?`).join(', ')} WHERE id = ?`).run(...cols.map(([, v]) => v), id);
    },
    list: (scope) => read(`SELECT * FROM events ${eventScopeWhere(scope)} ORDER BY id DESC`).all().map((r) => eventRow(r)!),
    page: (scope, offset, limit) =>
      read(`SELECT * FROM events ${eventScopeWhere(scope)} ORDER BY id DESC LIMIT ? OFFSET ?`).all(limit, offset).map((r) => eventRow(r)!),
    count: (scope) => db.prepare(`SELECT COUNT(*) FROM events ${eventScopeWhere(scope)}`).pluck().get() as number,
    prune: (before, keep) => db.transaction(() => {
      const old = db.prepare('DELETE FROM events WHERE created < ?').run(before).changes;
      const over = db.prepare('DELETE FROM events WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET ?)').run(keep).changes;
      return old + over;
    }).immediate(),
    markSeenUpTo: (id) => void db.prepare('UPDATE events SET seen = 1 WHERE id <= ?').run(id),
  };
}

export const sqliteAddresses = (db: Db): AddressRepository => gateOf(db).wrap<AddressRepository>(immediateAddresses(db));

function immediateAddresses(db: Db): Immediate<AddressRepository> {
  return {
    allocate(cidr, ownerType, ownerId) {
      const range = parseCidr(cidr);
      if (!range) return undefined;
      const used = new Set(db.prepare('SELECT ip FROM addresses WHERE pool = ?').pluck().all(cidr) as string[]);
      const ip = ipv4Candidates(range, used).next();
      if (ip.done) return undefined;
      db.prepare('INSERT INTO addresses (ip, pool, owner_type, owner_id) VALUES (?, ?, ?, ?)').run(ip.value, cidr, ownerType, ownerId);
      return ip.value;
    },
    allocateIpv6(cidr, ownerType, ownerId) {
      const range = parseIpv6Cidr(cidr);
      if (!range) return undefined;
      const used = new Set((db.prepare('SELECT ip FROM addresses WHERE pool = ?').pluck().all(cidr) as string[]).map((ip) => parseIpv6(ip)));
      const n = ipv6Candidates(range, used).next();
      if (n.done) return undefined;
      const ip = formatIpv6(n.value);
      db.prepare('INSERT INTO addresses (ip, pool, owner_type, owner_id) VALUES (?, ?, ?, ?)').run(ip, cidr, ownerType, ownerId);
      return ip;
    },
    release: (t, id) => void db.prepare('DELETE FROM addresses WHERE owner_type = ? AND owner_id = ?').run(t, id),
    owned: (t, id) => db.prepare('SELECT ip FROM addresses WHERE owner_type = ? AND owner_id = ? ORDER BY ip').pluck().all(t, id) as string[],
  };
}

export const sqliteDataplanes = (db: Db): DataplaneRepository => gateOf(db).wrap<DataplaneRepository>(immediateDataplanes(db));

function immediateDataplanes(db: Db): Immediate<DataplaneRepository> {
  const read = (sql: string) => db.prepare<unknown[], DataplaneRow>(sql);
  return {
    upsert(s) {
      db.prepare(
        `INSERT INTO dataplanes (id, region, connected, replica, version_applied, last_error, last_error_at, last_seen)
         VALUES (@id, @region, @connected, @replica, @versionApplied, @lastError, @lastErrorAt, @lastSeen)
         ON CONFLICT(id) DO UPDATE SET region = excluded.region, connected = excluded.connected, replica = excluded.replica,
           version_applied = excluded.version_applied, last_error = excluded.last_error,
           last_error_at = excluded.last_error_at, last_seen = excluded.last_seen`,
      ).run({ ...s, connected: s.connected ? 1 : 0 });
    },
    get: (id) => dataplaneRow(read('SELECT * FROM dataplanes WHERE id = ?').get(id)),
    list: () => read('SELECT * FROM dataplanes ORDER BY id').all().map((r) => dataplaneRow(r)!),
    release: (replica, id, at) => void releaseHosts(db, 'dataplanes', replica, id, at),
  };
}

/** Marks disconnected the hosts of one table that `replica` holds (only `id`, when given). */
export function releaseHosts(db: Db, table: 'dataplanes' | 'database_agents', replica: string, id?: string, at?: number): void {
  db.prepare(`UPDATE ${table} SET connected = 0, last_seen = COALESCE(@at, last_seen)
    WHERE connected = 1 AND replica = @replica AND (@id IS NULL OR id = @id)`).run({ replica, id: id ?? null, at: at ?? null });
}

export function sqliteReplicaBeats(db: Db): ReplicaRepository {
  return gateOf(db).wrap<ReplicaRepository>({
    beat(id, at) {
      if (db.prepare('UPDATE control_plane_replicas SET heartbeat_at = ? WHERE id = ?').run(at, id).changes === 1) return true;
      db.prepare('INSERT INTO control_plane_replicas (id, heartbeat_at) VALUES (?, ?)').run(id, at);
      return false;
    },
    sweep(since) {
      return db.transaction(() => {
        let n = 0;
        for (const table of ['dataplanes', 'database_agents']) {
          n += db.prepare(`UPDATE ${table} SET connected = 0 WHERE connected = 1
            AND replica NOT IN (SELECT id FROM control_plane_replicas WHERE heartbeat_at >= ?)`).run(since).changes;
        }
        db.prepare('DELETE FROM control_plane_replicas WHERE heartbeat_at < ?').run(since);
        return n;
      }).immediate();
    },
  });
}

export const sqliteKeyValue = (db: Db): KeyValueRepository => gateOf(db).wrap<KeyValueRepository>(immediateKeyValue(db));

function immediateKeyValue(db: Db): Immediate<KeyValueRepository> {
  return {
    get: (k) => db.prepare('SELECT v FROM kv WHERE k = ?').pluck().get(k) as string | undefined,
    set: (k, v) => void db.prepare('INSERT INTO kv (k, v) VALUES (?, ?) ON CONFLICT(k) DO UPDATE SET v = excluded.v').run(k, v),
  };
}
