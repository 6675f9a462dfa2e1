import type { Migration } from './migrations.js';

/** The fleet PKI (docs/security/grpc.md): join tokens and issued certificates, in the core range. */
export const fleetMigrations: Migration[] = [
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
];
