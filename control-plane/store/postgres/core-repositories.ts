import { parseCidr } from '../../../lib/ipv4.js';
import { formatIpv6, parseIpv6, parseIpv6Cidr } from '../../../lib/ipv6.js';
import type { AddressRepository, KeyValueRepository, ReplicaRepository } from '../../domain/ports.js';
import type { DataplaneRepository } from '../../domain/nodebalancers/repository.js';
import type { EventRepository } from '../../domain/events/repository.js';
import type { TokenRepository, UserRepository } from '../../domain/auth/repository.js';
import { dataplaneRow, eventRow, tokenRow, userRow, type DataplaneRow, type EventRow, type TokenRow, type UserRow } from '../common/rows.js';
import { eventPatchColumns, eventScopeWhere, ipv4Candidates, ipv6Candidates, type SequenceName } from '../common/queries.js';
import { pgSql as q, type PgExecutor } from './executor.js';
import { isPgUniqueViolation } from '../unique-violation.js';
import { UniqueViolation } from '../../domain/ports.js';

/** Runs a write that may take a username, reporting a taken one as the field's UniqueViolation. */
async function claimingUsername<T>(write: () => Promise<T>): Promise<T> {
  try {
    return await write();
  } catch (err) {
    if (isPgUniqueViolation(err, 'users_username_key')) throw new UniqueViolation('username', { cause: err });
    throw err;
  }
}

/**
 * The next id of a table whose ids are never reused (migration 102), in one statement: the
 * UPDATE locks the sequence row, so two writers at once get different ids, each above the
 * highest id ever issued and the highest present.
 */
export async function nextSequenceId(x: PgExecutor, name: SequenceName): Promise<number> {
  const r = await x.one<{ last: number }>(`UPDATE id_sequences SET last = GREATEST(last, (SELECT COALESCE(MAX(id), 0) FROM ${name})) + 1 WHERE name = $1 RETURNING last`, [name]);
  return r!.last;
}

export function pgUsers(x: PgExecutor): UserRepository {
  return {
    get: async (id) => userRow(await x.one<UserRow>('SELECT * FROM users WHERE id = $1', [id])),
    byUsername: async (u) => userRow(await x.one<UserRow>('SELECT * FROM users WHERE username = $1', [u])),
    async create(u) {
      const r = await claimingUsername(() => x.one<{ id: number }>(q('INSERT INTO users (username, email, restricted, grants) VALUES (?, ?, ?, ?) RETURNING id'),
        [u.username, u.email, u.restricted ? 1 : 0, JSON.stringify(u.grants)]));
      return { ...u, id: r!.id, timezone: 'UTC' };
    },
    changeGrants: (id, change) => x.transaction(async () => {
      const u = userRow(await x.one<UserRow>('SELECT * FROM users WHERE id = $1 FOR UPDATE', [id]));
      if (!u) return undefined;
      change(u.grants);
      await x.query('UPDATE users SET grants = $1 WHERE id = $2', [JSON.stringify(u.grants), id]);
      return u.grants;
    }),
    count: async () => (await x.one<{ n: number }>('SELECT COUNT(*) AS n FROM users'))!.n,
    list: async () => (await x.rows<UserRow>('SELECT * FROM users ORDER BY id')).map((r) => userRow(r)!),
    async update(id, p) {
      if (p.username !== undefined) await claimingUsername(() => x.query('UPDATE users SET username = $1 WHERE id = $2', [p.username, id]));
      if (p.email !== undefined) await x.query('UPDATE users SET email = $1 WHERE id = $2', [p.email, id]);
      if (p.restricted !== undefined) await x.query('UPDATE users SET restricted = $1 WHERE id = $2', [p.restricted ? 1 : 0, id]);
      if (p.timezone !== undefined) await x.query('UPDATE users SET timezone = $1 WHERE id = $2', [p.timezone, id]);
    },
    preferences: async (id) => (await x.one<{ preferences: string }>('SELECT preferences FROM users WHERE id = $1', [id]))?.preferences,
    setPreferences: async (id, json) => void (await x.query('UPDATE users SET preferences = $1 WHERE id = $2', [json, id])),
    delete: async (id) => void (await x.query('DELETE FROM users WHERE id = $1', [id])),
  };
}

export function pgTokens(x: PgExecutor): TokenRepository {
  return {
    byHash: async (h) => tokenRow(await x.one<TokenRow>('SELECT * FROM tokens WHERE token_hash = $1', [h])),
    get: async (id) => tokenRow(await x.one<TokenRow>('SELECT * FROM tokens WHERE id = $1', [id])),
    listByUser: async (uid) => (await x.rows<TokenRow>('SELECT * FROM tokens WHERE user_id = $1 ORDER BY id', [uid])).map((r) => tokenRow(r)!),
    async create(t) {
      const id = await x.transaction(async () => {
        const next = await nextSequenceId(x, 'tokens');
        await x.query(q('INSERT INTO tokens (id, user_id, label, scopes, token_hash, token_prefix, created, expiry) VALUES (?, ?, ?, ?, ?, ?, ?, ?)'),
          [next, t.userId, t.label, t.scopes, t.tokenHash, t.tokenPrefix, t.created, t.expiry]);
        return next;
      });
      return { id, userId: t.userId, label: t.label, scopes: t.scopes, tokenPrefix: t.tokenPrefix, created: t.created, expiry: t.expiry };
    },
    async update(id, patch) {
      if (patch.label !== undefined) await x.query('UPDATE tokens SET label = $1 WHERE id = $2', [patch.label, id]);
    },
    delete: async (id) => void (await x.query('DELETE FROM tokens WHERE id = $1', [id])),
  };
}

export function pgEvents(x: PgExecutor): EventRepository {
  return {
    async create(e) {
      const r = await x.one<{ id: number }>(q(
        `INSERT INTO events (created, action, username, entity_id, entity_type, entity_label, entity_url, secondary_entity, hosts,
           status, percent_complete, duration, message, seen, read) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?) RETURNING id`,
      ), [
        e.created, e.action, e.username, e.entity?.id ?? null, e.entity?.type ?? null, e.entity?.label ?? null,
        e.entity?.url ?? null, e.secondaryEntity ? JSON.stringify(e.secondaryEntity) : null, e.hosts?.length ? JSON.stringify(e.hosts) : null, e.status,
        e.percentComplete, e.duration, e.message, e.seen ? 1 : 0, e.read ? 1 : 0,
      ]);
      return { ...e, id: r!.id };
    },
    get: async (id) => eventRow(await x.one<EventRow>('SELECT * FROM events WHERE id = $1', [id])),
    async update(id, p) {
      const cols = eventPatchColumns(p);
      if (cols.length === 0) return;
      await x.query(`UPDATE events SET ${cols.map(([c], i) => `${c} = $${i + 1}`).join(', ')} WHERE id = $${cols.length + 1}`, [...cols.map(([, v]) => v), id]);
    },
    list: async (scope) => (await x.rows<EventRow>(`SELECT * FROM events ${eventScopeWhere(scope)} ORDER BY id DESC`)).map((r) => eventRow(r)!),
    page: async (scope, offset, limit) =>
      (await x.rows<EventRow>(`SELECT * FROM events ${eventScopeWhere(scope)} ORDER BY id DESC LIMIT $1 OFFSET $2`, [limit, offset])).map((r) => eventRow(r)!),
    count: async (scope) => Number((await x.one<{ n: number }>(`SELECT COUNT(*) AS n FROM events ${eventScopeWhere(scope)}`))!.n),
    prune: (before, keep) => x.transaction(async () => {
      const old = (await x.query('DELETE FROM events WHERE created < $1', [before])).rowCount ?? 0;
      const over = (await x.query('DELETE FROM events WHERE id <= (SELECT id FROM events ORDER BY id DESC LIMIT 1 OFFSET $1)', [keep])).rowCount ?? 0;
      return old + over;
    }),
    markSeenUpTo: async (id) => void (await x.query('UPDATE events SET seen = 1 WHERE id <= $1', [id])),
  };
}

export function pgAddresses(x: PgExecutor): AddressRepository {
  return {
    async allocate(cidr, ownerType, ownerId) {
      const range = parseCidr(cidr);
      if (!range) return undefined;
      const used = new Set((await x.rows<{ ip: string }>('SELECT ip FROM addresses WHERE pool = $1', [cidr])).map((r) => r.ip));
      // The address is claimed by its primary key: a concurrent writer that took it first makes
      // this insert do nothing, and the next free address is tried, so two writers never share one.
      for (const ip of ipv4Candidates(range, used)) {
        const r = await x.query('INSERT INTO addresses (ip, pool, owner_type, owner_id) VALUES ($1, $2, $3, $4) ON CONFLICT (ip) DO NOTHING', [ip, cidr, ownerType, ownerId]);
        if (r.rowCount === 1) return ip;
      }
      return undefined;
    },
    async allocateIpv6(cidr, ownerType, ownerId) {
      const range = parseIpv6Cidr(cidr);
      if (!range) return undefined;
      const used = new Set((await x.rows<{ ip: string }>('SELECT ip FROM addresses WHERE pool = $1', [cidr])).map((r) => parseIpv6(r.ip)));
      // Claimed by primary key, as for IPv4: an address a concurrent writer took first is skipped.
      for (const n of ipv6Candidates(range, used)) {
        const ip = formatIpv6(n);
        const r = await x.query('INSERT INTO addresses (ip, pool, owner_type, owner_id) VALUES ($1, $2, $3, $4) ON CONFLICT (ip) DO NOTHING', [ip, cidr, ownerType, ownerId]);
        if (r.rowCount === 1) return ip;
        // Counted as in use, so the walk goes one further.
        used.add(n);
      }
      return undefined;
    },
    release: async (t, id) => void (await x.query('DELETE FROM addresses WHERE owner_type = $1 AND owner_id = $2', [t, id])),
    owned: async (t, id) => (await x.rows<{ ip: string }>('SELECT ip FROM addresses WHERE owner_type = $1 AND owner_id = $2 ORDER BY ip', [t, id])).map((r) => r.ip),
  };
}

export function pgDataplanes(x: PgExecutor): DataplaneRepository {
  return {
    async upsert(s) {
      await x.query(
        `INSERT INTO dataplanes (id, region, connected, version_applied, last_error, last_error_at, last_seen, replica)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
         ON CONFLICT (id) DO UPDATE SET region = excluded.region, connected = excluded.connected, replica = excluded.replica,
           version_applied = excluded.version_applied, last_error = excluded.last_error,
           last_error_at = excluded.last_error_at, last_seen = excluded.last_seen`,
        [s.id, s.region, s.connected ? 1 : 0, s.versionApplied, s.lastError, s.lastErrorAt, s.lastSeen, s.replica],
      );
    },
    get: async (id) => dataplaneRow(await x.one<DataplaneRow>('SELECT * FROM dataplanes WHERE id = $1', [id])),
    list: async () => (await x.rows<DataplaneRow>('SELECT * FROM dataplanes ORDER BY id')).map((r) => dataplaneRow(r)!),
    release: (replica, id, at) => pgReleaseHosts(x, 'dataplanes', replica, id, at),
  };
}

/** Marks disconnected the hosts of one table that `replica` holds (only `id`, when given). */
export async function pgReleaseHosts(x: PgExecutor, table: 'dataplanes' | 'database_agents', replica: string, id?: string, at?: number): Promise<void> {
  await x.query(`UPDATE ${table} SET connected = 0, last_seen = COALESCE($3::BIGINT, last_seen)
    WHERE connected = 1 AND replica = $1 AND ($2::TEXT IS NULL OR id = $2)`, [replica, id ?? null, at ?? null]);
}

export function pgReplicaBeats(x: PgExecutor): ReplicaRepository {
  return {
    async beat(id, at) {
      if ((await x.query('UPDATE control_plane_replicas SET heartbeat_at = $2 WHERE id = $1', [id, at])).rowCount === 1) return true;
      // Only this replica writes its own row: no other insert of the same id can race this one.
      await x.query('INSERT INTO control_plane_replicas (id, heartbeat_at) VALUES ($1, $2) ON CONFLICT (id) DO NOTHING', [id, at]);
      return false;
    },
    // One transaction, so a replica is forgotten only together with clearing its hosts.
    sweep: (since) => x.transaction(async () => {
      let n = 0;
      for (const table of ['dataplanes', 'database_agents']) {
        const r = await x.query(`UPDATE ${table} SET connected = 0 WHERE connected = 1
          AND replica NOT IN (SELECT id FROM control_plane_replicas WHERE heartbeat_at >= $1)`, [since]);
        n += r.rowCount ?? 0;
      }
      await x.query('DELETE FROM control_plane_replicas WHERE heartbeat_at < $1', [since]);
      return n;
    }),
  };
}

export function pgKeyValue(x: PgExecutor): KeyValueRepository {
  return {
    get: async (k) => (await x.one<{ v: string }>('SELECT v FROM kv WHERE k = $1', [k]))?.v,
    set: async (k, v) => void (await x.query('INSERT INTO kv (k, v) VALUES ($1, $2) ON CONFLICT (k) DO UPDATE SET v = excluded.v', [k, v])),
    // SERIALIZABLE: of two replicas reading and raising the same counter, one is run again.
    atomically: (fn) => x.transaction(fn),
  };
}
