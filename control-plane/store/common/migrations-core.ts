import { autoId, type Migration } from './dialect.js';

/** Users, tokens, events, addresses, data planes, key-value, the fleet PKI and NodeBalancers (0xx, 1xx; 271, 280). */
export const coreMigrations: Migration[] = [
  {
    id: '001-core',
    sql: (d) => `
      CREATE TABLE users (
        id ${autoId(d)},
        username TEXT NOT NULL UNIQUE,
        email TEXT NOT NULL DEFAULT '',
        restricted INTEGER NOT NULL DEFAULT 0,
        -- JSON: {"global": {"add_nodebalancers": true, ...}, "nodebalancer": {"<id>": "read_only"}, "database": {...}}
        grants TEXT NOT NULL DEFAULT '{}'
      );
      CREATE TABLE tokens (
        id INTEGER PRIMARY KEY,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        scopes TEXT NOT NULL,
        token_hash TEXT NOT NULL UNIQUE,
        token_prefix TEXT NOT NULL,
        created INTEGER NOT NULL,
        expiry INTEGER
      );
      CREATE TABLE events (
        id ${autoId(d)},
        created INTEGER NOT NULL,
        action TEXT NOT NULL,
        username TEXT,
        entity_id INTEGER,
        entity_type TEXT,
        entity_label TEXT,
        entity_url TEXT,
        secondary_entity TEXT,
        status TEXT NOT NULL,
        percent_complete INTEGER,
        duration REAL,
        message TEXT,
        seen INTEGER NOT NULL DEFAULT 0,
        read INTEGER NOT NULL DEFAULT 0
      );
      CREATE INDEX events_entity ON events(entity_type, entity_id);
      CREATE TABLE addresses (
        ip TEXT PRIMARY KEY,
        pool TEXT NOT NULL,
        owner_type TEXT NOT NULL,
        owner_id INTEGER NOT NULL
      );
${d === 'postgres' ? '      CREATE INDEX addresses_owner ON addresses(owner_type, owner_id);\n' : ''}      CREATE TABLE dataplanes (
        id TEXT PRIMARY KEY,
        region TEXT NOT NULL,
        connected INTEGER NOT NULL DEFAULT 0,
        version_applied INTEGER NOT NULL DEFAULT 0,
        last_error TEXT,
        last_error_at INTEGER,
        last_seen INTEGER
      );
      CREATE TABLE kv (k TEXT PRIMARY KEY, v TEXT NOT NULL);
    `,
  },
  {
    id: '050-fleet-pki',
    sql: `
      CREATE TABLE fleet_join_tokens (
        id TEXT PRIMARY KEY,
        secret_hash TEXT NOT NULL,
        role TEXT NOT NULL,
        host_id TEXT NOT NULL,
        region TEXT NOT NULL,
        created INTEGER NOT NULL,
        expires INTEGER NOT NULL,
        used_at INTEGER
      );
      CREATE TABLE fleet_certificates (
        serial TEXT PRIMARY KEY,
        role TEXT NOT NULL,
        host_id TEXT NOT NULL,
        region TEXT NOT NULL,
        issued_at INTEGER NOT NULL,
        not_after INTEGER NOT NULL,
        revoked_at INTEGER
      );
      CREATE INDEX fleet_certificates_host ON fleet_certificates(role, host_id);
    `,
  },
  {
    id: '101-nodebalancers',
    sql: `
      CREATE TABLE nodebalancers (
        id INTEGER PRIMARY KEY,
        label TEXT NOT NULL UNIQUE,
        region TEXT NOT NULL,
        ipv4 TEXT NOT NULL,
        client_conn_throttle INTEGER NOT NULL DEFAULT 0,
        tags TEXT NOT NULL DEFAULT '[]',
        created INTEGER NOT NULL,
        updated INTEGER NOT NULL
      );
      CREATE TABLE nb_configs (
        id INTEGER PRIMARY KEY,
        nodebalancer_id INTEGER NOT NULL REFERENCES nodebalancers(id) ON DELETE CASCADE,
        port INTEGER NOT NULL,
        protocol TEXT NOT NULL,
        algorithm TEXT NOT NULL,
        stickiness TEXT NOT NULL,
        "check" TEXT NOT NULL,
        check_interval INTEGER NOT NULL,
        check_timeout INTEGER NOT NULL,
        check_attempts INTEGER NOT NULL,
        check_path TEXT NOT NULL,
        check_body TEXT NOT NULL,
        check_passive INTEGER NOT NULL,
        proxy_protocol TEXT NOT NULL,
        cipher_suite TEXT NOT NULL,
        ssl_cert TEXT,
        ssl_key TEXT,
        ssl_commonname TEXT NOT NULL DEFAULT '',
        ssl_fingerprint TEXT NOT NULL DEFAULT '',
        UNIQUE (nodebalancer_id, port)
      );
      CREATE TABLE nb_nodes (
        id INTEGER PRIMARY KEY,
        config_id INTEGER NOT NULL REFERENCES nb_configs(id) ON DELETE CASCADE,
        nodebalancer_id INTEGER NOT NULL REFERENCES nodebalancers(id) ON DELETE CASCADE,
        label TEXT NOT NULL,
        address TEXT NOT NULL,
        weight INTEGER NOT NULL,
        mode TEXT NOT NULL,
        status TEXT NOT NULL DEFAULT 'unknown'
      );
      CREATE TABLE nb_traffic (
        nodebalancer_id INTEGER NOT NULL,
        config_id INTEGER NOT NULL,
        bucket INTEGER NOT NULL, -- start of the 5-minute bucket, ms
        bytes_in INTEGER NOT NULL DEFAULT 0,
        bytes_out INTEGER NOT NULL DEFAULT 0,
        connections INTEGER NOT NULL DEFAULT 0,
        PRIMARY KEY (nodebalancer_id, config_id, bucket)
      );
    `,
  },
  {
    // SQLite reuses the highest rowid after it is deleted; the real API never reuses an id
    // (clients, grants and events refer to ids), so ids come from a sequence that only grows.
    id: '102-id-sequences',
    // PostgreSQL came later: its tables are empty when this runs.
    sql: (d) => d === 'postgres' ? `
      CREATE TABLE id_sequences (name TEXT PRIMARY KEY, last INTEGER NOT NULL);
      INSERT INTO id_sequences (name, last) VALUES ('nodebalancers', 0), ('nb_configs', 0), ('nb_nodes', 0), ('tokens', 0);
    ` : `
      CREATE TABLE id_sequences (name TEXT PRIMARY KEY, last INTEGER NOT NULL);
      INSERT INTO id_sequences (name, last) SELECT 'nodebalancers', COALESCE(MAX(id), 0) FROM nodebalancers;
      INSERT INTO id_sequences (name, last) SELECT 'nb_configs', COALESCE(MAX(id), 0) FROM nb_configs;
      INSERT INTO id_sequences (name, last) SELECT 'nb_nodes', COALESCE(MAX(id), 0) FROM nb_nodes;
      INSERT INTO id_sequences (name, last) SELECT 'tokens', COALESCE(MAX(id), 0) FROM tokens;
    `,
  },
  {
    // Snapshot building reads configs per NodeBalancer and nodes per config; without these
    // indexes a 1,000-NodeBalancer snapshot took over a second to build.
    id: '103-nb-indexes',
    sql: `
      CREATE INDEX IF NOT EXISTS nb_configs_nodebalancer ON nb_configs(nodebalancer_id);
      CREATE INDEX IF NOT EXISTS nb_nodes_config ON nb_nodes(config_id);
      CREATE INDEX IF NOT EXISTS nb_nodes_nodebalancer ON nb_nodes(nodebalancer_id);
    `,
  },
  {
    // Fields today's clients send and read: types, the UDP throttle and the udp config fields.
    id: '104-nb-udp-types',
    sql: `
      ALTER TABLE nodebalancers ADD COLUMN type TEXT NOT NULL DEFAULT 'common';
      ALTER TABLE nodebalancers ADD COLUMN client_udp_sess_throttle INTEGER NOT NULL DEFAULT 0;
      ALTER TABLE nb_configs ADD COLUMN udp_check_port INTEGER NOT NULL DEFAULT 80;
      ALTER TABLE nb_configs ADD COLUMN udp_session_timeout INTEGER NOT NULL DEFAULT 16;
    `,
  },
  {
    // A NodeBalancer's IPv6 address from the operator's IPv6 pool (NULL without one).
    id: '150-nb-ipv6',
    sql: `ALTER TABLE nodebalancers ADD COLUMN ipv6 TEXT;`,
  },
  {
    // A host an admin removed: refused by every replica whatever certificate it shows, until a
    // join token made after the removal brings it back (docs/security/grpc.md, "Revocation").
    id: '271-fleet-removed-hosts',
    sql: `
      CREATE TABLE fleet_removed_hosts (
        role TEXT NOT NULL,
        host_id TEXT NOT NULL,
        removed_at INTEGER NOT NULL,
        PRIMARY KEY (role, host_id)
      );
    `,
  },
  {
    // Per-user profile settings and the free-form preferences object Cloud Manager keeps
    // (GET/PUT /profile/preferences, replaced whole; docs/api.md, "Profile and account").
    id: '280-profile-preferences',
    sql: `
      ALTER TABLE users ADD COLUMN timezone TEXT NOT NULL DEFAULT 'UTC';
      ALTER TABLE users ADD COLUMN preferences TEXT NOT NULL DEFAULT '{}';
    `,
  },
  {
    // The agent hosts an event is about (a JSON array of ids, NULL for none): the Fleet page finds
    // a host's events by it (host-overview.ts), not by what the message says.
    id: '281-event-hosts',
    sql: 'ALTER TABLE events ADD COLUMN hosts TEXT;',
  },
];
