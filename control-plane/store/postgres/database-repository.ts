import type { SecretBox } from '../../../lib/secret-box.js';
import type { DatabaseRepository } from '../../domain/databases/repository.js';
import { MAX_MEMBERS } from '../../domain/databases/model.js';
import { agentRow, backupRow, databaseRow, databaseValues, memberRow, operationRow, reportRow, slotRow, type AgentRow, type BackupRow, type DatabaseRow, type MemberRow, type OperationRow, type ReportRow, type SlotRow } from '../common/rows.js';
import { PUT_MEMBER_REPORT } from '../common/queries.js';
import { nextSequenceId, pgReleaseHosts } from './core-repositories.js';
import type { PgExecutor } from './executor.js';

/** PostgreSQL adapter of the DatabaseRepository port; secret columns sealed as in SQLite. */
export function pgDatabaseRepository(x: PgExecutor, box: SecretBox): DatabaseRepository {
  const get = async (id: number) => databaseRow(await x.one<DatabaseRow>('SELECT * FROM databases WHERE id = $1', [id]), box);
  return {
    transaction: (fn) => x.transaction(fn),
    list: async () => (await x.rows<DatabaseRow>('SELECT * FROM databases ORDER BY id')).map((r) => databaseRow(r, box)!),
    get,
    async create(d) {
      // Ids come from a sequence that only grows (a deleted database's id is never handed out again).
      return x.transaction(async () => {
        const row = { ...databaseValues(d, box), id: await nextSequenceId(x, 'databases') };
        const cols = Object.keys(row);
        const r = await x.one<DatabaseRow>(
          `INSERT INTO databases (${cols.map((c) => `"${c}"`).join(', ')}) VALUES (${cols.map((_, i) => `$${i + 1}`).join(', ')}) RETURNING *`,
          cols.map((c) => (row as Record<string, unknown>)[c]),
        );
        return databaseRow(r, box)!;
      });
    },
    async update(id, patch) {
      const row = databaseValues(patch, box);
      const cols = Object.keys(row);
      if (cols.length === 0) return (await get(id))!;
      const r = await x.one<DatabaseRow>(
        `UPDATE databases SET ${cols.map((c, i) => `"${c}" = $${i + 1}`).join(', ')} WHERE id = $${cols.length + 1} RETURNING *`,
        [...cols.map((c) => row[c]), id],
      );
      return databaseRow(r, box)!;
    },
    purge: async (id) => void (await x.query('DELETE FROM databases WHERE id = $1', [id])),

    backups: async (databaseId) => (await x.rows<BackupRow>('SELECT * FROM database_backups WHERE database_id = $1 ORDER BY created, id', [databaseId])).map(backupRow),
    async backup(databaseId, id) {
      const r = await x.one<BackupRow>('SELECT * FROM database_backups WHERE database_id = $1 AND id = $2', [databaseId, id]);
      return r ? backupRow(r) : undefined;
    },
    syncBackups: (databaseId, list) => x.transaction(async () => {
      const deleting = new Set((await x.rows<{ id: number }>("SELECT id FROM database_backups WHERE database_id = $1 AND status = 'deleting'", [databaseId])).map((r) => r.id));
      await x.query("DELETE FROM database_backups WHERE database_id = $1 AND status = 'ready'", [databaseId]);
      for (const b of list) {
        if (deleting.has(b.id)) continue;
        await x.query(
          "INSERT INTO database_backups (database_id, id, label, type, target, created, size_bytes, status) VALUES ($1, $2, $3, $4, $5, $6, $7, 'ready') ON CONFLICT DO NOTHING",
          [databaseId, b.id, b.label, b.type, b.target, b.created, b.sizeBytes],
        );
      }
    }),
    setBackupStatus: async (databaseId, id, status) =>
      void (await x.query('UPDATE database_backups SET status = $1 WHERE database_id = $2 AND id = $3', [status, databaseId, id])),
    deleteBackup: async (databaseId, id) => void (await x.query('DELETE FROM database_backups WHERE database_id = $1 AND id = $2', [databaseId, id])),

    async createOperation(op) {
      await x.query('INSERT INTO database_operations (id, database_id, kind, payload, event_id, state, error, created) VALUES ($1, $2, $3, $4, $5, $6, $7, $8)',
        [op.id, op.databaseId, op.kind, box.seal(JSON.stringify(op.payload), 'database_operations.payload'), op.eventId, op.state, op.error, op.created]);
    },
    async operation(id) {
      const r = await x.one<OperationRow>('SELECT * FROM database_operations WHERE id = $1', [id]);
      return r ? operationRow(r, box) : undefined;
    },
    async pendingOperations(databaseId) {
      const rows = databaseId === undefined
        ? await x.rows<OperationRow>("SELECT * FROM database_operations WHERE state = 'pending' ORDER BY created, id")
        : await x.rows<OperationRow>("SELECT * FROM database_operations WHERE state = 'pending' AND database_id = $1 ORDER BY created, id", [databaseId]);
      return rows.map((r) => operationRow(r, box));
    },
    finishOperation: async (id, state, error, output = null) => void (await x.query('UPDATE database_operations SET state = $1, error = $2, output = $3 WHERE id = $4', [state, error, output, id])),
    setOperationPayload: async (id, payload) => void (await x.query('UPDATE database_operations SET payload = $1 WHERE id = $2', [box.seal(JSON.stringify(payload), 'database_operations.payload'), id])),

    async members(databaseId) {
      const rows = databaseId === undefined
        ? await x.rows<MemberRow>('SELECT * FROM database_members ORDER BY database_id, member')
        : await x.rows<MemberRow>('SELECT * FROM database_members WHERE database_id = $1 ORDER BY member', [databaseId]);
      return rows.map(memberRow);
    },
    setMembers: (databaseId, agents) => x.transaction(async () => {
      for (const [k, agent] of agents.entries()) {
        // A member that changes agent here is no longer the server its seeding mark was about.
        await x.query(`INSERT INTO database_members (database_id, member, agent_id) VALUES ($1, $2, $3) ON CONFLICT (database_id, member) DO UPDATE SET agent_id = excluded.agent_id,
          seed_since = CASE WHEN database_members.agent_id = excluded.agent_id THEN database_members.seed_since END,
          seed_gtid = CASE WHEN database_members.agent_id = excluded.agent_id THEN database_members.seed_gtid END`,
          [databaseId, k + 1, agent]);
      }
      // A scale down drops the members past the new size.
      await x.query('DELETE FROM database_members WHERE database_id = $1 AND member > $2', [databaseId, agents.length]);
      // What agents said of members past the new size describes servers that are gone.
      await x.query('DELETE FROM database_member_reports WHERE database_id = $1 AND member > $2', [databaseId, agents.length]);
    }),

    placeMember: (databaseId, member, agentId, seed) => x.transaction(async () => {
      if (agentId === '') await x.query('UPDATE database_members SET agent_id = $1, seed_since = NULL, seed_gtid = NULL WHERE database_id = $2 AND member = $3', [agentId, databaseId, member]);
      else {
        await x.query(`UPDATE database_members SET agent_id = $1, server_id = (SELECT GREATEST(MAX(COALESCE(server_id, member)), ${MAX_MEMBERS}) + 1 FROM database_members WHERE database_id = $2),
          seed_since = $4, seed_gtid = $5 WHERE database_id = $2 AND member = $3`, [agentId, databaseId, member, seed?.since ?? null, seed?.gtid ?? null]);
      }
      await x.query('DELETE FROM database_member_reports WHERE database_id = $1 AND member = $2', [databaseId, member]);
    }),
    endSeed: async (databaseId, member, agentId) => (await x.query('UPDATE database_members SET seed_since = NULL, seed_gtid = NULL WHERE database_id = $1 AND member = $2 AND agent_id = $3 AND seed_since IS NOT NULL',
      [databaseId, member, agentId])).rowCount === 1,

    agents: async () => (await x.rows<AgentRow>('SELECT * FROM database_agents ORDER BY id')).map(agentRow),
    setAgentLost: async (id, at) => (await x.query('UPDATE database_agents SET lost_at = $1 WHERE id = $2', [at, id])).rowCount === 1,
    setAgentDraining: async (id, at) => (await x.query('UPDATE database_agents SET draining_at = $1 WHERE id = $2', [at, id])).rowCount === 1,
    async agent(id) {
      const r = await x.one<AgentRow>('SELECT * FROM database_agents WHERE id = $1', [id]);
      return r ? agentRow(r) : undefined;
    },
    async upsertAgent(a) {
      await x.query(`INSERT INTO database_agents (id, region, runtime, members_across_hosts, connected, replica, last_seen, applied_version, engines, backup_store) VALUES ($1, $2, $3, $4, $5, $9, $6, $7, $8, $10)
        ON CONFLICT (id) DO UPDATE SET region = excluded.region, runtime = excluded.runtime, members_across_hosts = excluded.members_across_hosts, connected = excluded.connected, replica = excluded.replica, last_seen = excluded.last_seen, applied_version = excluded.applied_version, engines = excluded.engines, backup_store = excluded.backup_store`,
      [a.id, a.region, a.runtime, a.membersAcrossHosts ? 1 : 0, a.connected ? 1 : 0, a.lastSeen, a.appliedVersion, JSON.stringify(a.engines), a.replica, a.backupStore ?? '']);
    },

    claimBackupSlot: (databaseId, slot, at) => x.transaction(async () => {
      // The primary key decides between replicas claiming the same day at once.
      const r = await x.query('INSERT INTO database_backup_slots (database_id, slot, claimed) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [databaseId, slot, at]);
      if (r.rowCount !== 1) return false;
      await x.query('DELETE FROM database_backup_slots WHERE database_id = $1 AND slot < $2', [databaseId, slot]);
      return true;
    }),
    backupSlots: async () => (await x.rows<SlotRow>(
      'SELECT s.* FROM database_backup_slots s WHERE s.slot = (SELECT MAX(slot) FROM database_backup_slots WHERE database_id = s.database_id) ORDER BY s.database_id',
    )).map(slotRow),
    markBackupSlotsTaken: async (databaseId, upTo, at) =>
      (await x.query('UPDATE database_backup_slots SET taken = $1 WHERE database_id = $2 AND slot <= $3 AND taken IS NULL', [at, databaseId, upTo])).rowCount ?? 0,

    putMemberReport: async (r) => void (await x.query(PUT_MEMBER_REPORT.replace(/%(\d)/g, '$$$1'), [r.databaseId, r.member, r.agentId, r.state, r.role, r.gtid, r.address, r.reported])),
    async memberReports(databaseId) {
      const rows = databaseId === undefined
        ? await x.rows<ReportRow>('SELECT * FROM database_member_reports ORDER BY database_id, member')
        : await x.rows<ReportRow>('SELECT * FROM database_member_reports WHERE database_id = $1 ORDER BY member', [databaseId]);
      return rows.map(reportRow);
    },
    releaseAgents: (replica, id, at) => pgReleaseHosts(x, 'database_agents', replica, id, at),

    markAgentEvent: async (id, databaseId, at) =>
      (await x.query('INSERT INTO database_agent_events (id, database_id, at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING', [id, databaseId, at])).rowCount === 1,
  };
}
