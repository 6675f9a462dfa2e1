import mysql from 'mysql2';
import { ADMIN_USER, REPL_USER } from './accounts.js';
import { q, type AdminConnection } from './admin.js';

/** Schemas that belong to the server, never to the customer. */
const SYSTEM_SCHEMAS = ['mysql', 'information_schema', 'performance_schema', 'sys'];
/** Accounts the agent owns (root, replication, linroot) or the server needs. */
export const SYSTEM_USERS = ['root', 'mariadb.sys', REPL_USER, ADMIN_USER, ''];

export async function customerSchemas(c: AdminConnection): Promise<string[]> {
  return (await q(c, 'SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA')).map((r) => String(r.s)).filter((d) => !SYSTEM_SCHEMAS.includes(d));
}

/**
 * The first line of the account section of a backup this agent writes. Backups from before it
 * start with LEGACY_ACCOUNTS_HEADER and hold `SHOW CREATE USER` / `SHOW GRANTS` text, which the
 * server renders without escaping REQUIRE SUBJECT/ISSUER/CIPHER strings: that text is never
 * replayed (agent/backup/load-backup.ts, docs/security/mysql.md).
 */
export const ACCOUNTS_HEADER = '-- Fulcrum: customer accounts v2 (rows of the privilege tables)';
export const LEGACY_ACCOUNTS_HEADER = '-- Fulcrum: customer accounts';

/**
 * The privilege tables an account lives in (MariaDB 10.4+), in load order. proxies_priv is left
 * out: granting PROXY needs a PROXY grant linroot does not hold, so customer accounts have none.
 */
const PRIVILEGE_TABLES = ['global_priv', 'db', 'tables_priv', 'columns_priv', 'procs_priv', 'roles_mapping'];
/** Server-maintained columns the copy leaves to their defaults (a TIMESTAMP would move with the session's time zone). */
const SKIPPED_COLUMNS = new Set(['Timestamp']);
/** Privilege table column names are the server's; anything else is refused rather than quoted. */
const COLUMN_NAME = /^[A-Za-z_]+$/;

/**
 * The customer's accounts as SQL, for backups and for seeding a rebuilt node: the rows of the
 * privilege tables (users and roles with their authentication, TLS requirements and limits as
 * the server stores them in mysql.global_priv, then their schema, table, column, routine and
 * role grants), each written as a REPLACE whose every value is quoted by the driver (mysql2's
 * escaping), then FLUSH PRIVILEGES. Nothing the server rendered from customer input (SHOW
 * CREATE USER, SHOW GRANTS) is written: a REQUIRE SUBJECT string is a quoted value here, never
 * SQL. Copying rows instead of GRANTs also carries grants on tables and routines, which a GRANT
 * refuses before the dump that follows has created them. The agent's own accounts (and every
 * row that grants to them) are left out: they come from the desired state. The session is put
 * in utf8mb4 and a sql_mode without NO_BACKSLASH_ESCAPES first, the quoting the driver assumes.
 */
export async function customerAccountsSql(c: AdminConnection): Promise<string> {
  const out: string[] = [ACCOUNTS_HEADER, "SET NAMES utf8mb4;", "SET SESSION sql_mode = 'NO_ENGINE_SUBSTITUTION';"];
  for (const table of PRIVILEGE_TABLES) {
    // Every column as the server's text (all are CHAR, ENUM, SET or JSON text), so that the
    // driver parses nothing (it would turn global_priv.Priv into an object) and the copy is exact.
    const [rows] = await c.query({ sql: `SELECT * FROM mysql.${mysql.escapeId(table)}`, typeCast: (field) => field.string('utf8') });
    for (const row of rows as Record<string, unknown>[]) {
      if (SYSTEM_USERS.includes(String(row.User))) continue;
      const cols = Object.keys(row).filter((k) => !SKIPPED_COLUMNS.has(k));
      const bad = cols.find((k) => !COLUMN_NAME.test(k));
      if (bad !== undefined) throw new Error(`mysql.${table} has an unexpected column ${JSON.stringify(bad)}`);
      const odd = cols.find((k) => row[k] !== null && typeof row[k] === 'object' && !Buffer.isBuffer(row[k]));
      if (odd !== undefined) throw new Error(`mysql.${table}.${odd} is not a plain value`);
      out.push(`${mysql.format(`REPLACE INTO mysql.${mysql.escapeId(table)} (??) VALUES (?)`, [cols, cols.map((k) => row[k]) as mysql.SqlValue[]])};`);
    }
  }
  out.push('FLUSH PRIVILEGES;', '');
  return out.join('\n');
}

/** The useful part of a MariaDB client's stderr: its ERROR line when it printed one. */
export function clientError(stderr: string): string {
  const line = /^ERROR .*$/m.exec(stderr);
  return (line ? line[0] : stderr.trim()).slice(0, 500);
}

/**
 * Options for every `mariadb` SQL client the agent runs as root: LOAD DATA LOCAL INFILE off,
 * so no SQL fed to it (a backup, a dump, a binlog) can make the client read a file of the
 * host and send it to the server. The client enables it unless told not to.
 */
export const SQL_CLIENT = ['mariadb', '--local-infile=0'] as const;
