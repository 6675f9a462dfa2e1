import type { AgentRecord, BackupRecord, DatabaseRecord, MemberPlacement, OperationRecord } from '../domain/databases/model.js';

/**
 * Storage port of the Managed Databases domain. Synchronous like the other ports; `transaction`
 * runs its function atomically. Rows of deleted databases stay (with `deleting`) until the agent
 * confirms the removal, so `list` includes them and callers filter.
 */
export interface DatabaseRepository {
  transaction<T>(fn: () => T): T;
  list(): DatabaseRecord[];
  get(id: number): DatabaseRecord | undefined;
  create(d: Omit<DatabaseRecord, 'id'>): DatabaseRecord;
  update(id: number, patch: Partial<Omit<DatabaseRecord, 'id'>>): DatabaseRecord;
  /** Removes the row and everything hanging off it. */
  purge(id: number): void;

  backups(databaseId: number): BackupRecord[];
  backup(databaseId: number, id: number): BackupRecord | undefined;
  /** Replaces the ready backups with the agent's list; rows marked deleting are kept as they are. */
  syncBackups(databaseId: number, list: Omit<BackupRecord, 'databaseId' | 'status'>[]): void;
  setBackupStatus(databaseId: number, id: number, status: BackupRecord['status']): void;
  deleteBackup(databaseId: number, id: number): void;

  createOperation(op: OperationRecord): void;
  operation(id: string): OperationRecord | undefined;
  pendingOperations(databaseId?: number): OperationRecord[];
  finishOperation(id: string, state: 'done' | 'failed', error: string | null): void;

  /** Member placements of one database, or of every database; ordered by database and member. */
  members(databaseId?: number): MemberPlacement[];
  /**
   * Places member k+1 on agents[k]: the whole set, replacing any earlier one (placements move only
   * when a database is scaled, and members past the new size are dropped).
   */
  setMembers(databaseId: number, agents: string[]): void;

  agents(): AgentRecord[];
  agent(id: string): AgentRecord | undefined;
  upsertAgent(a: AgentRecord): void;

  /** Records an agent event id; false when it was already recorded. */
  markAgentEvent(id: string, databaseId: number, at: number): boolean;
}
