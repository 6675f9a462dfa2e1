import type { Db } from './database.js';
import { sealUnderLock, secretsOf } from './secrets.js';
import { nextSequenceId, releaseHosts } from './core-repositories.js';
import type { DatabaseRepository } from '../../domain/databases/repository.js';
import type { Immediate } from './gate.js';
import { gateOf } from './gate.js';
import { MAX_MEMBERS, type DatabaseRecord } from '../../domain/databases/model.js';
import { agentRow, backupRow, databaseRow, databaseValues, memberRow, operationRow, reportRow, slotRow, type AgentRow, type BackupRow, type DatabaseRow, type MemberRow, type OperationRow, type ReportRow, type SlotRow } from '../common/rows.js';
import { PUT_MEMBER_REPORT } from '../common/queries.js';

/** SQLite adapter of the DatabaseRepository port (tables of migrations-databases.ts). */
export const sqliteDatabaseRepository = (db: Db): DatabaseRepository => gateOf(db).wrap<DatabaseRepository>(immediateDatabases(db));

function immediateDatabases(db: Db): Omit<Immediate<DatabaseRepository>, 'transaction'> {
  const box = secretsOf(db);
  const fromRow = (r: DatabaseRow | undefined) => databaseRow(r, box);
  const toRow = (d: Partial<DatabaseRecord>) => databaseValues(d, box);
  const opRow = (r: OperationRow) => operationRow(r, box);
  const read = <R>(sql: string) => db.prepare<unknown[], R>(sql);
  const get = (id: number) => fromRow(read<DatabaseRow>('SELECT * FROM databases WHERE id = ?').get(id));
  return {
    list: () => read<DatabaseRow>('SELECT * FROM databases ORDER BY id').all().map((r) => fromRow(r)!),
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

    backups: (databaseId) => read<BackupRow>('SELECT * FROM database_backups WHERE database_id = ? ORDER BY created, id').all(databaseId).map(backupRow),
    backup(databaseId, id) {
      const r = read<BackupRow>('SELECT * FROM database_backups WHERE database_id = ? AND id = ?').get(databaseId, id);
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
      const r = read<OperationRow>('SELECT * FROM database_operations WHERE id = ?').get(id);
      return r ? opRow(r) : undefined;
    },
    pendingOperations(databaseId) {
      const rows = databaseId === undefined
        ? read<OperationRow>("SELECT * FROM database_operations WHERE state = 'pending' ORDER BY created, id").all()
        : read<OperationRow>("SELECT * FROM database_operations WHERE state = 'pending' AND database_id = ? ORDER BY created, id").all(databaseId);
      return rows.map(opRow);
    },
    finishOperation(id, state, error, output = null) {
      db.prepare('UPDATE database_operations SET state = ?, error = ?, output = ? WHERE id = ?').run(state, error, output, id);
    },
    setOperationPayload(id, payload) {
      sealUnderLock(db, () => db.prepare('UPDATE database_operations SET payload = ? WHERE id = ?').run(box.seal(JSON.stringify(payload), 'database_operations.payload'), id));
    },

    members(databaseId) {
      const rows = databaseId === undefined
        ? read<MemberRow>('SELECT * FROM database_members ORDER BY database_id, member').all()
        : read<MemberRow>('SELECT * FROM database_members WHERE database_id = ? ORDER BY member').all(databaseId);
      return rows.map(memberRow);
    },
    setMembers(databaseId, agents) {
      // An upsert, not a REPLACE: a member kept keeps its server_id.
      // A member that changes agent here is no longer the server its seeding mark was about.
      const ins = db.prepare(`INSERT INTO database_members (database_id, member, agent_id) VALUES (?, ?, ?) ON CONFLICT (database_id, member) DO UPDATE SET agent_id = excluded.agent_id,
        seed_since = CASE WHEN database_members.agent_id = excluded.agent_id THEN database_members.seed_since END,
        seed_gtid = CASE WHEN database_members.agent_id = excluded.agent_id THEN database_members.seed_gtid END`);
      agents.forEach((agent, k) => ins.run(databaseId, k + 1, agent));
      db.prepare('DELETE FROM database_members WHERE database_id = ? AND member > ?').run(databaseId, agents.length);
      // What agents said of members past the new size describes servers that are gone.
      db.prepare('DELETE FROM database_member_reports WHERE database_id = ? AND member > ?').run(databaseId, agents.length);
    },

    placeMember(databaseId, member, agentId, seed) {
      db.transaction(() => {
        if (agentId === '') db.prepare('UPDATE database_members SET agent_id = ?, seed_since = NULL, seed_gtid = NULL WHERE database_id = ? AND member = ?').run(agentId, databaseId, member);
        else {
          db.prepare(`UPDATE database_members SET agent_id = ?, server_id = (SELECT MAX(MAX(COALESCE(server_id, member)), ${MAX_MEMBERS}) + 1 FROM database_members WHERE database_id = ?),
            seed_since = ?, seed_gtid = ? WHERE database_id = ? AND member = ?`).run(agentId, databaseId, seed?.since ?? null, seed?.gtid ?? null, databaseId, member);
        }
        db.prepare('DELETE FROM database_member_reports WHERE database_id = ? AND member = ?').run(databaseId, member);
      }).immediate();
    },
    endSeed(databaseId, member, agentId) {
      return db.prepare('UPDATE database_members SET seed_since = NULL, seed_gtid = NULL WHERE database_id = ? AND member = ? AND agent_id = ? AND seed_since IS NOT NULL')
        .run(databaseId, member, agentId).changes === 1;
    },

    agents: () => read<AgentRow>('SELECT * FROM database_agents ORDER BY id').all().map(agentRow),
    setAgentLost(id, at) {
      return db.prepare('UPDATE database_agents SET lost_at = ? WHERE id = ?').run(at, id).changes === 1;
    },
    setAgentDraining(id, at) {
      return db.prepare('UPDATE database_agents SET draining_at = ? WHERE id = ?').run(at, id).changes === 1;
    },
    agent(id) {
      const r = read<AgentRow>('SELECT * FROM database_agents WHERE id = ?').get(id);
      return r ? agentRow(r) : undefined;
    },
    upsertAgent(a) {
      db.prepare(`INSERT INTO database_agents (id, region, runtime, members_across_hosts, connected, replica, last_seen, applied_version, engines, backup_store) VALUES (@id, @region, @runtime, @across, @connected, @replica, @last_seen, @applied_version, @engines, @backup_store)
        ON CONFLICT(id) DO UPDATE SET region = excluded.region, runtime = excluded.runtime, members_across_hosts = excluded.members_across_hosts, connected = excluded.connected, replica = excluded.replica, last_seen = excluded.last_seen, applied_version = excluded.applied_version, engines = excluded.engines, backup_store = excluded.backup_store`)
        .run({ id: a.id, region: a.region, runtime: a.runtime, across: a.membersAcrossHosts ? 1 : 0, connected: a.connected ? 1 : 0, replica: a.replica, last_seen: a.lastSeen, applied_version: a.appliedVersion, engines: JSON.stringify(a.engines), backup_store: a.backupStore ?? '' });
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
      return read<SlotRow>('SELECT s.* FROM database_backup_slots s WHERE s.slot = (SELECT MAX(slot) FROM database_backup_slots WHERE database_id = s.database_id) ORDER BY s.database_id').all().map(slotRow);
    },
    markBackupSlotsTaken(databaseId, upTo, at) {
      return db.prepare('UPDATE database_backup_slots SET taken = ? WHERE database_id = ? AND slot <= ? AND taken IS NULL').run(at, databaseId, upTo).changes;
    },
    putMemberReport(r) {
      db.prepare(PUT_MEMBER_REPORT.replace(/%\d/g, '?')).run(r.databaseId, r.member, r.agentId, r.state, r.role, r.gtid, r.address, r.reported);
    },
    memberReports(databaseId) {
      const rows = databaseId === undefined
        ? read<ReportRow>('SELECT * FROM database_member_reports ORDER BY database_id, member').all()
        : read<ReportRow>('SELECT * FROM database_member_reports WHERE database_id = ? ORDER BY member').all(databaseId);
      return rows.map(reportRow);
    },
    releaseAgents: (replica, id, at) => releaseHosts(db, 'database_agents', replica, id, at),

    markAgentEvent(id, databaseId, at) {
      return db.prepare('INSERT OR IGNORE INTO database_agent_events (id, database_id, at) VALUES (?, ?, ?)').run(id, databaseId, at).changes === 1;
    },
  };
}
