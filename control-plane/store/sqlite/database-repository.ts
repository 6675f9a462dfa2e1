import type { Db } from './database.js';
import type { SecretBox } from '../../../lib/secret-box.js';
import { sealUnderLock, secretsOf } from './secrets.js';
import { nextSequenceId, releaseHosts } from './core-repositories.js';
import type { DatabaseRepository } from '../database-repository.js';
import type { Immediate } from '../store.js';
import { gateOf } from './gate.js';
import type { AgentRecord, BackupRecord, BackupSlot, MemberReport, DatabaseRecord, MemberPlacement, OperationRecord } from '../../domain/databases/model.js';

// `secret` columns are sealed at rest (secrets.ts, docs/security/secrets.md).
export const columns: [keyof DatabaseRecord, string, 'json' | 'bool' | 'plain' | 'secret' | 'secret-json'][] = [
  ['label', 'label', 'plain'], ['region', 'region', 'plain'], ['type', 'type', 'plain'],
  ['engineId', 'engine_id', 'plain'], ['version', 'version', 'plain'], ['image', 'image', 'plain'],
  ['binary', 'binary', 'plain'], ['clusterSize', 'cluster_size', 'plain'], ['replicationType', 'replication_type', 'plain'],
  ['encrypted', 'encrypted', 'bool'], ['sslConnection', 'ssl_connection', 'bool'], ['allowList', 'allow_list', 'json'],
  ['updates', 'updates', 'json'], ['status', 'status', 'plain'], ['hostPrimary', 'host_primary', 'plain'],
  ['hostSecondary', 'host_secondary', 'plain'], ['port', 'port', 'plain'], ['provisioned', 'provisioned', 'bool'],
  ['members', 'members', 'json'], ['caCert', 'ca_cert', 'plain'], ['usedDiskMb', 'used_disk_mb', 'plain'],
  ['patchPending', 'patch_pending', 'bool'], ['engineConfig', 'engine_config', 'json'], ['secondEventId', 'second_event_id', 'plain'],
  ['rootPassword', 'root_password', 'secret'], ['nextPassword', 'next_password', 'secret'], ['generation', 'generation', 'plain'],
  ['convergedGeneration', 'converged_generation', 'plain'], ['runState', 'run_state', 'plain'], ['agentId', 'agent_id', 'plain'], ['term', 'term', 'plain'], ['primaryMember', 'primary_member', 'plain'],
  ['pendingEventId', 'pending_event_id', 'plain'], ['deleting', 'deleting', 'bool'], ['deleteEventId', 'delete_event_id', 'plain'],
  ['lastError', 'last_error', 'plain'], ['created', 'created', 'plain'], ['updated', 'updated', 'plain'],
  ['fork', 'fork', 'json'], ['oldestRestoreMs', 'oldest_restore_ms', 'plain'],
  ['clusterSecrets', 'cluster_secrets', 'secret-json'],
];

export function toRowWith(d: Partial<DatabaseRecord>, box: SecretBox): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, col, kind] of columns) {
    if (!(key in d)) continue;
    const v = d[key];
    if (kind === 'secret-json') out[col] = v ? box.seal(JSON.stringify(v), `databases.${col}`) : null;
    else out[col] = kind === 'json' ? JSON.stringify(v) : kind === 'bool' ? (v ? 1 : 0) : kind === 'secret' ? box.sealNullable(v as string | null, `databases.${col}`) : v;
  }
  return out;
}

export function fromRowWith(r: any, box: SecretBox): DatabaseRecord | undefined {
  if (!r) return undefined;
  const out: Record<string, unknown> = { id: r.id };
  for (const [key, col, kind] of columns) {
    const v = r[col];
    if (kind === 'secret-json') out[key] = v ? JSON.parse(box.open(v, `databases.${col}`)) : null;
    else out[key] = kind === 'json' ? JSON.parse(v) : kind === 'bool' ? v === 1 : kind === 'secret' ? box.openNullable(v, `databases.${col}`) : v;
  }
  return out as unknown as DatabaseRecord;
}

export function backupRow(r: any): BackupRecord {
  return { databaseId: r.database_id, id: r.id, label: r.label, type: r.type, target: r.target, created: r.created, sizeBytes: r.size_bytes, status: r.status };
}

export function opRowWith(r: any, box: SecretBox): OperationRecord {
  return { id: r.id, databaseId: r.database_id, kind: r.kind, payload: JSON.parse(box.open(r.payload, 'database_operations.payload')), eventId: r.event_id, state: r.state, error: r.error, created: r.created };
}

export function memberRow(r: any): MemberPlacement {
  return { databaseId: r.database_id, member: r.member, agentId: r.agent_id };
}

export function slotRow(r: any): BackupSlot {
  return { databaseId: Number(r.database_id), slot: r.slot, claimed: Number(r.claimed), taken: r.taken === null ? null : Number(r.taken) };
}

export function reportRow(r: any): MemberReport {
  return { databaseId: Number(r.database_id), member: Number(r.member), agentId: r.agent_id, state: r.state, role: r.role, gtid: r.gtid, address: r.address, reported: Number(r.reported) };
}

/** One upsert for both stores (SQLite and PostgreSQL read `excluded` alike). */
export const PUT_MEMBER_REPORT = `INSERT INTO database_member_reports (database_id, member, agent_id, state, role, gtid, address, reported)
  VALUES (%1, %2, %3, %4, %5, %6, %7, %8) ON CONFLICT (database_id, member) DO UPDATE SET agent_id = excluded.agent_id, state = excluded.state,
  role = excluded.role, gtid = excluded.gtid, address = excluded.address, reported = excluded.reported`;

export function agentRow(r: any): AgentRecord {
  return { id: r.id, region: r.region, runtime: r.runtime, membersAcrossHosts: r.members_across_hosts === 1, connected: r.connected === 1, replica: r.replica, lastSeen: r.last_seen, appliedVersion: r.applied_version, engines: JSON.parse(r.engines),
    lostAt: r.lost_at === null || r.lost_at === undefined ? null : Number(r.lost_at) };
}

/** SQLite adapter of the DatabaseRepository port (tables of migrations-databases.ts). */
export function sqliteDatabaseRepository(db: Db): DatabaseRepository {
  return gateOf(db).wrap<DatabaseRepository>(immediateDatabases(db));
}

function immediateDatabases(db: Db): Omit<Immediate<DatabaseRepository>, 'transaction'> {
  const box = secretsOf(db);
  const fromRow = (r: any) => fromRowWith(r, box);
  const toRow = (d: Partial<DatabaseRecord>) => toRowWith(d, box);
  const opRow = (r: any) => opRowWith(r, box);
  const get = (id: number) => fromRow(db.prepare('SELECT * FROM databases WHERE id = ?').get(id));
  return {
    list: () => (db.prepare('SELECT * FROM databases ORDER BY id').all() as any[]).map((r) => fromRow(r)!),
    get,
    create(d) {
      // Ids come from a sequence that only grows (a deleted database's id is never handed out again).
      const id = db.transaction(() => {
        const row = { ...toRow(d), id: nextSequenceId(db, 'databases') };
        const cols = Object.keys(row);
        db.prepare(`INSERT INTO databases (${cols.map((c) => `"${c}"`).join(', ')}) VALUES (${cols.map((c) => `@${c}`).join(', ')})`).run(row);
        return row.id;
      }).immediate();
      return get(id)!;
    },
    update(id, patch) {
      // Sealed under the write lock (sealUnderLock in secrets.ts).
      sealUnderLock(db, () => {
        const row = toRow(patch);
        const cols = Object.keys(row);
        if (cols.length > 0) db.prepare(`UPDATE databases SET ${cols.map((c) => `"${c}" = @${c}`).join(', ')} WHERE id = @id`).run({ ...row, id });
      });
      return get(id)!;
    },
    purge(id) {
      db.prepare('DELETE FROM databases WHERE id = ?').run(id);
    },

    backups: (databaseId) => (db.prepare('SELECT * FROM database_backups WHERE database_id = ? ORDER BY created, id').all(databaseId) as any[]).map(backupRow),
    backup(databaseId, id) {
      const r = db.prepare('SELECT * FROM database_backups WHERE database_id = ? AND id = ?').get(databaseId, id);
      return r ? backupRow(r) : undefined;
    },
    syncBackups(databaseId, list) {
      const deleting = new Set((db.prepare("SELECT id FROM database_backups WHERE database_id = ? AND status = 'deleting'").pluck().all(databaseId)) as number[]);
      db.prepare("DELETE FROM database_backups WHERE database_id = ? AND status = 'ready'").run(databaseId);
      const ins = db.prepare("INSERT OR IGNORE INTO database_backups (database_id, id, label, type, target, created, size_bytes, status) VALUES (?, ?, ?, ?, ?, ?, ?, 'ready')");
      for (const b of list) if (!deleting.has(b.id)) ins.run(databaseId, b.id, b.label, b.type, b.target, b.created, b.sizeBytes);
    },
    setBackupStatus(databaseId, id, status) {
      db.prepare('UPDATE database_backups SET status = ? WHERE database_id = ? AND id = ?').run(status, databaseId, id);
    },
    deleteBackup(databaseId, id) {
      db.prepare('DELETE FROM database_backups WHERE database_id = ? AND id = ?').run(databaseId, id);
    },

    createOperation(op) {
      sealUnderLock(db, () => db.prepare('INSERT INTO database_operations (id, database_id, kind, payload, event_id, state, error, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?)')
        .run(op.id, op.databaseId, op.kind, box.seal(JSON.stringify(op.payload), 'database_operations.payload'), op.eventId, op.state, op.error, op.created));
    },
    operation(id) {
      const r = db.prepare('SELECT * FROM database_operations WHERE id = ?').get(id);
      return r ? opRow(r) : undefined;
    },
    pendingOperations(databaseId) {
      const rows = databaseId === undefined
        ? db.prepare("SELECT * FROM database_operations WHERE state = 'pending' ORDER BY created, id").all()
        : db.prepare("SELECT * FROM database_operations WHERE state = 'pending' AND database_id = ? ORDER BY created, id").all(databaseId);
      return (rows as any[]).map(opRow);
    },
    finishOperation(id, state, error) {
      db.prepare('UPDATE database_operations SET state = ?, error = ? WHERE id = ?').run(state, error, id);
    },

    members(databaseId) {
      const rows = databaseId === undefined
        ? db.prepare('SELECT * FROM database_members ORDER BY database_id, member').all()
        : db.prepare('SELECT * FROM database_members WHERE database_id = ? ORDER BY member').all(databaseId);
      return (rows as any[]).map(memberRow);
    },
    setMembers(databaseId, agents) {
      const ins = db.prepare('INSERT OR REPLACE INTO database_members (database_id, member, agent_id) VALUES (?, ?, ?)');
      agents.forEach((agent, k) => ins.run(databaseId, k + 1, agent));
      db.prepare('DELETE FROM database_members WHERE database_id = ? AND member > ?').run(databaseId, agents.length);
      // What agents said of members past the new size describes servers that are gone.
      db.prepare('DELETE FROM database_member_reports WHERE database_id = ? AND member > ?').run(databaseId, agents.length);
    },

    placeMember(databaseId, member, agentId) {
      db.transaction(() => {
        db.prepare('UPDATE database_members SET agent_id = ? WHERE database_id = ? AND member = ?').run(agentId, databaseId, member);
        db.prepare('DELETE FROM database_member_reports WHERE database_id = ? AND member = ?').run(databaseId, member);
      }).immediate();
    },

    agents: () => (db.prepare('SELECT * FROM database_agents ORDER BY id').all() as any[]).map(agentRow),
    setAgentLost(id, at) {
      return db.prepare('UPDATE database_agents SET lost_at = ? WHERE id = ?').run(at, id).changes === 1;
    },
    agent(id) {
      const r = db.prepare('SELECT * FROM database_agents WHERE id = ?').get(id);
      return r ? agentRow(r) : undefined;
    },
    upsertAgent(a) {
      db.prepare(`INSERT INTO database_agents (id, region, runtime, members_across_hosts, connected, replica, last_seen, applied_version, engines) VALUES (@id, @region, @runtime, @across, @connected, @replica, @last_seen, @applied_version, @engines)
        ON CONFLICT(id) DO UPDATE SET region = excluded.region, runtime = excluded.runtime, members_across_hosts = excluded.members_across_hosts, connected = excluded.connected, replica = excluded.replica, last_seen = excluded.last_seen, applied_version = excluded.applied_version, engines = excluded.engines`)
        .run({ id: a.id, region: a.region, runtime: a.runtime, across: a.membersAcrossHosts ? 1 : 0, connected: a.connected ? 1 : 0, replica: a.replica, last_seen: a.lastSeen, applied_version: a.appliedVersion, engines: JSON.stringify(a.engines) });
    },

    claimBackupSlot(databaseId, slot, at) {
      return db.transaction(() => {
        if (db.prepare('INSERT OR IGNORE INTO database_backup_slots (database_id, slot, claimed) VALUES (?, ?, ?)').run(databaseId, slot, at).changes !== 1) return false;
        // Only the newest day is ever sent, so older ones are kept no longer.
        db.prepare('DELETE FROM database_backup_slots WHERE database_id = ? AND slot < ?').run(databaseId, slot);
        return true;
      }).immediate();
    },
    backupSlots() {
      return (db.prepare('SELECT s.* FROM database_backup_slots s WHERE s.slot = (SELECT MAX(slot) FROM database_backup_slots WHERE database_id = s.database_id) ORDER BY s.database_id').all() as any[]).map(slotRow);
    },
    markBackupSlotsTaken(databaseId, upTo, at) {
      return db.prepare('UPDATE database_backup_slots SET taken = ? WHERE database_id = ? AND slot <= ? AND taken IS NULL').run(at, databaseId, upTo).changes;
    },
    putMemberReport(r) {
      db.prepare(PUT_MEMBER_REPORT.replace(/%\d/g, '?')).run(r.databaseId, r.member, r.agentId, r.state, r.role, r.gtid, r.address, r.reported);
    },
    memberReports(databaseId) {
      const rows = databaseId === undefined
        ? db.prepare('SELECT * FROM database_member_reports ORDER BY database_id, member').all()
        : db.prepare('SELECT * FROM database_member_reports WHERE database_id = ? ORDER BY member').all(databaseId);
      return (rows as any[]).map(reportRow);
    },
    releaseAgents: (replica, id, at) => releaseHosts(db, 'database_agents', replica, id, at),

    markAgentEvent(id, databaseId, at) {
      return db.prepare('INSERT OR IGNORE INTO database_agent_events (id, database_id, at) VALUES (?, ?, ?)').run(id, databaseId, at).changes === 1;
    },
  };
}
