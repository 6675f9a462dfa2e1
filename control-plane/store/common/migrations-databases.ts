import { autoId, type Migration } from './dialect.js';

/** Managed databases (2xx) and the replicas' host streams (260). */
export const databaseMigrations: Migration[] = [
  {
    id: '201-databases',
    sql: (d) => `
      CREATE TABLE databases (
        id ${autoId(d)},
        label TEXT NOT NULL,
        region TEXT NOT NULL,
        type TEXT NOT NULL,
        engine_id TEXT NOT NULL,
        version TEXT NOT NULL,
        image TEXT NOT NULL DEFAULT '',
        ${d === 'postgres' ? '"binary"' : 'binary'} TEXT NOT NULL DEFAULT '',
        cluster_size INTEGER NOT NULL,
        replication_type TEXT NOT NULL,
        encrypted INTEGER NOT NULL,
        ssl_connection INTEGER NOT NULL,
        allow_list TEXT NOT NULL,      -- JSON array, echoed as sent
        updates TEXT NOT NULL,         -- JSON object
        status TEXT NOT NULL,
        host_primary TEXT NOT NULL,
        host_secondary TEXT,
        port INTEGER NOT NULL,
        provisioned INTEGER NOT NULL DEFAULT 0,
        members TEXT NOT NULL DEFAULT '{}',
        ca_cert TEXT,
        used_disk_mb INTEGER,
        root_password TEXT NOT NULL,
        next_password TEXT,
        generation INTEGER NOT NULL DEFAULT 1,
        converged_generation INTEGER NOT NULL DEFAULT 0,
        run_state TEXT NOT NULL DEFAULT 'running',
        agent_id TEXT,
        pending_event_id INTEGER,
        deleting INTEGER NOT NULL DEFAULT 0,
        delete_event_id INTEGER,
        last_error TEXT,
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL
      );
      CREATE TABLE database_backups (
        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
        id INTEGER NOT NULL,
        label TEXT NOT NULL,
        type TEXT NOT NULL,
        target TEXT NOT NULL DEFAULT 'primary',
        created INTEGER NOT NULL,
        size_bytes INTEGER NOT NULL DEFAULT 0,
        status TEXT NOT NULL DEFAULT 'ready',
        PRIMARY KEY (database_id, id)
      );
      CREATE TABLE database_operations (
        id TEXT PRIMARY KEY,
        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
        kind TEXT NOT NULL,
        payload TEXT NOT NULL,
        event_id INTEGER,
        state TEXT NOT NULL DEFAULT 'pending',
        error TEXT,
        created INTEGER NOT NULL
      );
      CREATE INDEX database_operations_pending ON database_operations (state, database_id);
      CREATE TABLE database_agents (
        id TEXT PRIMARY KEY,
        region TEXT NOT NULL,
        runtime TEXT NOT NULL DEFAULT '',
        connected INTEGER NOT NULL DEFAULT 0,
        last_seen INTEGER,
        applied_version INTEGER NOT NULL DEFAULT 0,
        engines TEXT NOT NULL DEFAULT '[]'
      );
      -- Agent-originated events already turned into account events (deduplication by id).
      CREATE TABLE database_agent_events (
        id TEXT PRIMARY KEY,
        database_id INTEGER NOT NULL,
        at INTEGER NOT NULL
      );
    `,
  },
  {
    // The newer platform's fields (docs/databases.md): a build waiting for the window
    // (updates.pending), the validated engine_config (JSON object), and the second event of a
    // PUT that both resizes and updates.
    id: '202-databases-current',
    sql: `
      ALTER TABLE databases ADD COLUMN patch_pending INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE databases ADD COLUMN engine_config TEXT NOT NULL DEFAULT '{}';
      ALTER TABLE databases ADD COLUMN second_event_id INTEGER;
    `,
  },
  {
    // Clusters across hosts (docs/databases.md): each member's agent, the cluster's term and the
    // member the control plane names primary. Databases placed before keep every member on their
    // one agent.
    id: '210-database-members',
    sql: (d) => `
      CREATE TABLE database_members (
        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
        member INTEGER NOT NULL,
        agent_id TEXT NOT NULL,
        PRIMARY KEY (database_id, member)
      );
      CREATE INDEX database_members_agent ON database_members (agent_id);
${d === 'sqlite' ? `      INSERT INTO database_members (database_id, member, agent_id)
        SELECT d.id, m.k, d.agent_id FROM databases d JOIN (SELECT 1 AS k UNION ALL SELECT 2 UNION ALL SELECT 3) m
        WHERE d.agent_id IS NOT NULL AND m.k <= d.cluster_size;
` : ''}      ALTER TABLE databases ADD COLUMN term INTEGER NOT NULL DEFAULT 1;
      ALTER TABLE databases ADD COLUMN primary_member INTEGER NOT NULL DEFAULT 1;
      ALTER TABLE database_agents ADD COLUMN members_across_hosts INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    // A spread cluster's CA and replication password, made by the control plane at placement and
    // sent to each member agent (docs/databases.md, "Clusters across hosts"); sealed (secrets.ts).
    id: '211-cluster-secrets',
    sql: 'ALTER TABLE databases ADD COLUMN cluster_secrets TEXT;',
  },
  {
    // Point-in-time forks (docs/databases.md, "Fork to a point in time"): the source and restore second of a
    // database made by a fork (JSON, null otherwise), and the oldest restorable instant the agent
    // reports.
    id: '220-database-pitr',
    sql: `
      ALTER TABLE databases ADD COLUMN fork TEXT NOT NULL DEFAULT 'null';
      ALTER TABLE databases ADD COLUMN oldest_restore_ms INTEGER;
    `,
  },
  {
    // Database ids come from the sequence NodeBalancers use (migration 102): SQLite hands the
    // highest rowid out again once it is deleted, and clients (Terraform state, scripts) take a
    // database id for one database forever.
    id: '240-database-id-sequence',
    sql: `
      INSERT INTO id_sequences (name, last) SELECT 'databases', COALESCE(MAX(id), 0) FROM databases;
    `,
  },
  {
    // A live database's label is unique (the service checks it in the same transaction; the
    // index is what makes it hold with two control planes writing to PostgreSQL at once, and
    // both stores keep the same schema).
    id: '241-database-live-labels',
    sql: `CREATE UNIQUE INDEX databases_live_label ON databases (label) WHERE deleting = 0;`,
  },
  {
    // Auto backups decided by the control plane (docs/databases.md, "Auto backups"): one row per
    // database and claimed day; the primary key is what makes a day claimed once across replicas.
    id: '250-database-backup-slots',
    sql: `
      CREATE TABLE database_backup_slots (
        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
        slot TEXT NOT NULL,
        claimed INTEGER NOT NULL,
        taken INTEGER,
        PRIMARY KEY (database_id, slot)
      );
    `,
  },
  {
    // What each spread cluster member's agent last reported, for the failover decision on the
    // lease holder (docs/databases.md, "Clusters across hosts").
    id: '251-database-member-reports',
    sql: `
      CREATE TABLE database_member_reports (
        database_id INTEGER NOT NULL REFERENCES databases(id) ON DELETE CASCADE,
        member INTEGER NOT NULL,
        agent_id TEXT NOT NULL,
        state TEXT NOT NULL,
        role TEXT NOT NULL,
        gtid TEXT NOT NULL,
        address TEXT NOT NULL,
        reported INTEGER NOT NULL,
        PRIMARY KEY (database_id, member)
      );
    `,
  },
  {
    // Which control-plane replica holds each host's stream, and each replica's heartbeat, so that
    // a replica's start, close or death clears only its own hosts' `connected`
    // (docs/architecture.md, "The streams"). With SQLite there is one replica, ''.
    id: '260-host-stream-replica',
    sql: `
      ALTER TABLE dataplanes ADD COLUMN replica TEXT NOT NULL DEFAULT '';
      ALTER TABLE database_agents ADD COLUMN replica TEXT NOT NULL DEFAULT '';
      CREATE TABLE control_plane_replicas (id TEXT PRIMARY KEY, heartbeat_at INTEGER NOT NULL);
    `,
  },
  {
    // When an operator (or --host-lost-after) declared an agent host lost: its members are
    // re-placed and it is never given them back (docs/multi-host.md, "A lost host").
    id: '290-agent-host-lost',
    sql: `
      ALTER TABLE database_agents ADD COLUMN lost_at INTEGER;
    `,
  },
  {
    // Forks from a shared object store (docs/databases.md, "Fork to a point in time"): each
    // agent's store identity (endpoint, bucket, prefix; '' for local folders) and each database's
    // backup key as its agent reported it (sealed, secrets.ts), handed to a fork's agent.
    id: '291-shared-backup-store',
    sql: `
      ALTER TABLE database_agents ADD COLUMN backup_store TEXT NOT NULL DEFAULT '';
      ALTER TABLE databases ADD COLUMN backup_key TEXT;
    `,
  },
  {
    // Draining an agent host (docs/multi-host.md, "Draining a host"): when it was put to drain
    // (nothing new is placed there, its members move off), and what an operation answered (a
    // fence's GTID position, read by the planned switchover that asked for it).
    id: '295-agent-host-drain',
    sql: `
      ALTER TABLE database_agents ADD COLUMN draining_at INTEGER;
      ALTER TABLE database_operations ADD COLUMN output TEXT;
    `,
  },
  {
    // A 1-node database rebuilt from the shared object store after its host was lost
    // (docs/multi-host.md, "A 1-node database on a lost host"): JSON while under way, null otherwise.
    id: '296-database-store-recovery',
    sql: `
      ALTER TABLE databases ADD COLUMN recovery TEXT NOT NULL DEFAULT 'null';
    `,
  },
  {
    // The GTID position a spread cluster's primary was named for in its term (the report the
    // failover decided on, or the fenced primary's in a planned switchover): its agent promotes it
    // only once it holds that position (docs/databases.md, "Clusters across hosts"). '' = none.
    id: '297-database-primary-position',
    sql: `
      ALTER TABLE databases ADD COLUMN primary_position TEXT NOT NULL DEFAULT '';
    `,
  },
  {
    // A member placed on a new host gets a server_id its database never used (docs/databases.md,
    // "Clusters across hosts"): null = the member index, as every member placed before has, so
    // no server restarts on upgrade.
    id: '298-database-member-server-id',
    sql: `
      ALTER TABLE database_members ADD COLUMN server_id INTEGER;
    `,
  },
  {
    // The term of the planned switchover's fence last abandoned (docs/multi-host.md, "Planned
    // switchover"): the fenced member's agent lifts only that fence. 0 = none.
    id: '299-database-fence-lifted-term',
    sql: `
      ALTER TABLE databases ADD COLUMN fence_lifted_term INTEGER NOT NULL DEFAULT 0;
    `,
  },
  {
    // A member placed on a new host and not yet caught up with its primary (model.ts MemberSeed):
    // since when, and the primary's GTID progress it must reach. NULL: not seeding.
    id: '299-database-member-seed',
    sql: `
      ALTER TABLE database_members ADD COLUMN seed_since INTEGER;
      ALTER TABLE database_members ADD COLUMN seed_gtid INTEGER;
    `,
  },
];
