import type { AgentRecord, BackupRecord, BackupSlot, MemberReport, DatabaseRecord, MemberPlacement, MemberSeed, OperationRecord } from './model.js';

/**
 * Storage port of the Managed Databases domain. Asynchronous like the other ports; `transaction`
 * runs its function atomically (domain/ports.ts). Rows of deleted databases stay (with `deleting`) until the agent
 * confirms the removal, so `list` includes them and callers filter.
 */
export interface DatabaseRepository {
  transaction<T>(fn: () => Promise<T>): Promise<T>;
  list(): Promise<DatabaseRecord[]>;
  get(id: number): Promise<DatabaseRecord | undefined>;
  create(d: Omit<DatabaseRecord, 'id'>): Promise<DatabaseRecord>;
  update(id: number, patch: Partial<Omit<DatabaseRecord, 'id'>>): Promise<DatabaseRecord>;
  /** Removes the row and everything hanging off it. */
  purge(id: number): Promise<void>;

  backups(databaseId: number): Promise<BackupRecord[]>;
  backup(databaseId: number, id: number): Promise<BackupRecord | undefined>;
  /** Replaces the ready backups with the agent's list; rows marked deleting are kept as they are. */
  syncBackups(databaseId: number, list: Omit<BackupRecord, 'databaseId' | 'status'>[]): Promise<void>;
  setBackupStatus(databaseId: number, id: number, status: BackupRecord['status']): Promise<void>;
  deleteBackup(databaseId: number, id: number): Promise<void>;

  createOperation(op: OperationRecord): Promise<void>;
  operation(id: string): Promise<OperationRecord | undefined>;
  pendingOperations(databaseId?: number): Promise<OperationRecord[]>;
  /** `output`: what the agent answered beyond ok (a fence's GTID position). */
  finishOperation(id: string, state: 'done' | 'failed', error: string | null, output?: string | null): Promise<void>;
  /** Replaces a pending operation's payload: the progress the control plane keeps of its own work (a rollout's). */
  setOperationPayload(id: string, payload: Record<string, unknown>): Promise<void>;

  /** Member placements of one database, or of every database; ordered by database and member. */
  members(databaseId?: number): Promise<MemberPlacement[]>;
  /**
   * Places member k+1 on agents[k]: the whole set, replacing any earlier one (placements move only
   * when a database is scaled, and members past the new size are dropped with their member
   * reports, so a scale down called in the transaction that stores the new size leaves no row
   * about a member that no longer exists).
   */
  setMembers(databaseId: number, agents: string[]): Promise<void>;

  /**
   * Moves one member to another agent ('' = placed nowhere, waiting for a host) and drops what
   * was reported of it: the server that report describes is not the member any more. Placed on
   * an agent, it gets a server_id above every one its database has and above any member index:
   * the primary may still hold a binlog dump thread of the member's old server, stuck writing to
   * a lost host, and a replica registering with that thread's server_id makes MariaDB kill it,
   * which froze every new connection to the primary for seconds (docs/performance.md,
   * "Re-placement of a 3-node member"). Its seeding mark is `seed` (a member placed on a new
   * host to be seeded from the primary), or none.
   */
  placeMember(databaseId: number, member: number, agentId: string, seed?: MemberSeed): Promise<void>;
  /**
   * Clears the seeding mark of a member still placed on `agentId`; false when there was none (it
   * moved, or another round cleared it first).
   */
  endSeed(databaseId: number, member: number, agentId: string): Promise<boolean>;

  agents(): Promise<AgentRecord[]>;
  /** Declares an agent host lost at `at`, or (null) no longer; false when no such agent is known. */
  setAgentLost(id: string, at: number | null): Promise<boolean>;
  /** Puts an agent host to drain (at, ms) or ends its drain (null); false for an unknown agent. */
  setAgentDraining(id: string, at: number | null): Promise<boolean>;
  agent(id: string): Promise<AgentRecord | undefined>;
  upsertAgent(a: AgentRecord): Promise<void>;
  /** As DataplaneRepository.release, for agents. */
  releaseAgents(replica: string, id?: string, at?: number): Promise<void>;

  /**
   * Claims one day's auto backup of a database: true when this call inserted it, false when it
   * was claimed already (by any replica). A new claim drops the database's older days.
   */
  claimBackupSlot(databaseId: number, slot: string, at: number): Promise<boolean>;
  /** The newest claimed day of each database, ordered by database. */
  backupSlots(): Promise<BackupSlot[]>;
  /** Marks a database's claimed days up to `upTo` taken (the agent reported it); how many changed. */
  markBackupSlotsTaken(databaseId: number, upTo: string, at: number): Promise<number>;

  /** Replaces what is known of one member (one row per database and member). */
  putMemberReport(r: MemberReport): Promise<void>;
  /** Member reports of one database, or of every database; ordered by database and member. */
  memberReports(databaseId?: number): Promise<MemberReport[]>;

  /** Records an agent event id; false when it was already recorded. */
  markAgentEvent(id: string, databaseId: number, at: number): Promise<boolean>;
}
