/**
 * The stored shape of a Managed Database and its backups and pending operations. The API
 * `status` is owned here (the control plane); the agent only reports what it observes, and
 * status-rules.ts decides how an observation moves the stored status.
 */
export type DatabaseStatus =
  | 'provisioning' | 'active' | 'suspending' | 'suspended' | 'resuming' | 'restoring'
  | 'failed' | 'degraded' | 'updating' | 'backing_up' | 'resizing';

export type ReplicationType = 'none' | 'asynch' | 'semi_synch';

export interface UpdatesWindow {
  frequency: 'weekly' | 'monthly';
  duration: number;
  hour_of_day: number;
  day_of_week: number | null;
  week_of_month: number | null;
}

/** `engine_config` as the API shows it: `{mysql?: {...}, binlog_retention_period?}`. */
export interface EngineConfig {
  mysql?: Record<string, string | number | boolean>;
  binlog_retention_period?: number;
}

export interface DatabaseRecord {
  id: number;
  label: string;
  region: string;
  type: string;
  /** `mysql/<version>` */
  engineId: string;
  version: string;
  /** What the agent runs for this engine (from the catalogue). */
  image: string;
  binary: string;
  clusterSize: 1 | 3;
  replicationType: ReplicationType;
  encrypted: boolean;
  sslConnection: boolean;
  allowList: string[];
  updates: UpdatesWindow;
  status: DatabaseStatus;
  /** Endpoint addresses allocated at create; shown in `hosts` once first active. */
  hostPrimary: string;
  hostSecondary: string | null;
  port: number;
  /** True once the database has been active at least once (hosts are then shown). */
  provisioned: boolean;
  members: Record<string, string>;
  caCert: string | null;
  usedDiskMb: number | null;
  /** The agent reports a new engine build waiting for the maintenance window (updates.pending). */
  patchPending: boolean;
  /** The validated `engine_config` (docs/databases.md, "engine_config"); `{}` when none. */
  engineConfig: EngineConfig;
  rootPassword: string;
  /** The password being rolled out by a credentials reset (null when none). */
  nextPassword: string | null;
  /** Increases with every change of the desired state sent to the agent. */
  generation: number;
  convergedGeneration: number;
  /** Desired run state: running or suspended. */
  runState: 'running' | 'suspended';
  /**
   * The agent whose reports give the database's status: the only agent when one runs every
   * member, else the agent of the current primary member (docs/databases.md, "Clusters across hosts").
   */
  agentId: string | null;
  /** Raised each time the control plane names a new primary; never lowered. */
  term: number;
  /** The member (1..cluster_size) the control plane names primary in `term`. */
  primaryMember: number;
  /**
   * The GTID position `primaryMember` was named primary for in `term` (from the report the
   * failover decided on, or the fenced primary's in a planned switchover): its agent promotes it
   * only once its node holds it, and no later promotion picks a member with less. '' (or absent,
   * a row from before) = no requirement.
   */
  primaryPosition?: string;
  /**
   * The term of the fence the control plane last abandoned, a spread cluster's planned switchover
   * (switchover.ts) or a 1-node database's move (single-move.ts): the agent makes the fenced node
   * writable again only for this explicit word. 0 or absent = none.
   */
  fenceLiftedTerm?: number;
  /**
   * A cluster spread over agents: its CA (certificate and key) and replication password, made by
   * the control plane when the members are placed and sent to every member agent (sealed at rest).
   * Absent or null when one agent runs every member (that agent makes its own).
   */
  clusterSecrets?: ClusterSecrets | null;
  /**
   * The key of the database's backups, bases and binlog segments: made by the control plane at
   * create, or (a database from before) the one its agent made and reported (sealed at rest); sent
   * to the agents running a member of it, and to the agent building a fork of it from a shared
   * store, never to another. Null for a database from before whose agent has reported none.
   */
  backupKey?: string | null;
  /** The long-running event that the next convergence completes (create, update, suspend...). */
  pendingEventId: number | null;
  /**
   * A second event the same convergence completes: a PUT that both resizes and updates records
   * database_resize and database_update, and Terraform waits for each (docs/databases.md).
   */
  secondEventId: number | null;
  /** Deleted through the API; kept (hidden) until the agent confirms it removed everything. */
  deleting: boolean;
  deleteEventId: number | null;
  lastError: string | null;
  created: number;
  updated: number;
  /** Set on a database made by a fork: the source and the restore second (ms, UTC). */
  fork?: DatabaseFork | null;
  /**
   * What the agent reports can truly be restored: the oldest backup followed by an unbroken
   * binlog chain (ms, a whole second); null until it has one (docs/databases.md, "Fork to a point in time").
   */
  oldestRestoreMs?: number | null;
  /**
   * A 1-node database whose host was lost and that is rebuilt on another agent from the shared
   * object store (docs/multi-host.md, "A 1-node database on a lost host"): the lost agent and when
   * it was declared lost; `placedMs` once placed on a new agent. Null when none is under way.
   */
  recovery?: DatabaseRecovery | null;
}

export interface DatabaseRecovery {
  from: string;
  lostMs: number;
  placedMs?: number;
  /**
   * A planned move off a draining host (single-move.ts): `from` was fenced and its archive
   * shipped up to the fence at `lostMs`, so nothing acknowledged is left behind.
   */
  planned?: boolean;
}

export interface BackupRecord {
  databaseId: number;
  id: number;
  label: string;
  type: 'auto' | 'snapshot';
  target: string;
  created: number;
  sizeBytes: number;
  /** ready backups are listed; deleting ones are hidden and no longer count. */
  status: 'ready' | 'deleting';
}

export type OperationKind = 'snapshot' | 'restore' | 'deleteBackup' | 'patch' | 'resetCredentials' | 'fence' | 'catchUp' | 'restartMember' | 'rollout';

export interface OperationRecord {
  id: string;
  databaseId: number;
  kind: OperationKind;
  payload: Record<string, unknown>;
  eventId: number | null;
  state: 'pending' | 'done' | 'failed';
  error: string | null;
  created: number;
  /** What the agent answered beyond ok (a fence's GTID position); null until then. */
  output?: string | null;
}

/**
 * One day's auto backup of one database, claimed by the replica that decided it is due; the
 * (database, day) pair is unique in the store, so no day is asked for twice (docs/databases.md,
 * "Auto backups").
 */
export interface BackupSlot {
  databaseId: number;
  /** UTC day, YYYY-MM-DD. */
  slot: string;
  /** When it was claimed (ms). */
  claimed: number;
  /** When the agent reported it taken (ms); null until then. */
  taken: number | null;
}

/**
 * What a member's agent last said of it (docs/databases.md, "Clusters across hosts"): kept in the
 * store, written by the replica the agent reports to, so the lease holder decides failovers from
 * every agent's reports, whichever replica they are connected to.
 */
export interface MemberReport {
  databaseId: number;
  member: number;
  agentId: string;
  state: string;
  role: string;
  gtid: string;
  /** address:port where the member listens ('' until known). */
  address: string;
  /** When it was written (ms). */
  reported: number;
}

/** The largest cluster_size: member indexes are 1..3, so a re-placed member's server_id starts above. */
export const MAX_MEMBERS = 3;

/** Where one member of a database runs; it stays on that agent for its life. */
export interface MemberPlacement {
  databaseId: number;
  /** 1..cluster_size (node k). */
  member: number;
  agentId: string;
  /**
   * The MariaDB server_id its server runs with: absent = the member index; once it was placed on
   * a new host, one its database never used before (repository.placeMember says why).
   */
  serverId?: number;
  /**
   * Set while the member, placed on a new host (its own was lost, or a drain moved it), has not
   * caught up with its primary: it holds none or only part of the data, so its database is
   * `degraded` and the member is not offered as a failover until the mark is cleared with the
   * "caught up" event (host-healing.ts). Kept in the store: any replica reads the status, and a
   * restarted or new lease holder goes on watching it.
   */
  seed?: MemberSeed;
}

/** A re-placed member's seeding: since when (ms), and the primary's GTID progress (gtidProgress) then, which it must reach. */
export interface MemberSeed {
  since: number;
  gtid: number;
}

export interface AgentRecord {
  id: string;
  region: string;
  runtime: string;
  /** The agent can run part of a cluster and replicate across hosts (AgentReport.members_across_hosts). */
  membersAcrossHosts: boolean;
  connected: boolean;
  /** The control-plane replica holding its stream ('' with one control plane), as for data planes. */
  replica: string;
  lastSeen: number | null;
  appliedVersion: number;
  engines: { id: string; engine: string; version: string; image: string; binary: string }[];
  /**
   * When the host was declared lost (ms), null or absent while it is not: its members are
   * re-placed on other hosts and never given back (docs/multi-host.md, "A lost host"). Written
   * only by setAgentLost; upsertAgent leaves it as it is.
   */
  lostAt?: number | null;
  /**
   * When an operator put the host to drain (ms), null or absent otherwise: nothing new is placed
   * on it and its members move off (docs/multi-host.md, "Draining a host"). Written only by
   * setAgentDraining.
   */
  drainingAt?: number | null;
  /** Its backup store's identity (AgentReport.backup_store); '' for local folders. */
  backupStore?: string;
}

/** What every member agent of a spread cluster shares (docs/databases.md, "Clusters across hosts"). */
export interface ClusterSecrets {
  caCertPem: string;
  caKeyPem: string;
  replPassword: string;
}

/**
 * A fork's source and restore second (ms, UTC). `throughSecond` (a fork asked for with no restore
 * time) makes the fork hold that whole second as well, up to the request.
 */
export interface DatabaseFork {
  source: number;
  restoreTimeMs: number;
  throughSecond?: boolean;
}
