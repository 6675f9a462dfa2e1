import { formatIpv4, parseCidr, prefixMask } from '../../lib/ipv4.js';
import type { AdminConnection } from './admin.js';
import { q } from './admin.js';

export const ADMIN_USER = 'linroot';
export const REPL_USER = 'fulcrum_repl';

/**
 * What linroot may do (docs/security/mysql.md): own and manage customer schemas and users, and
 * nothing that reaches the host or the agent's accounts. The schema privileges are granted on
 * the pattern `%` rather than on `*.*`, because MariaDB uses the most specific schema grant that
 * matches: the explicit read-only grant on `mysql` then wins over `%`, so the system schema
 * cannot be written (no self-granted privileges, no plugin rows, no routines defined as root).
 * PROCESS is given (information_schema's InnoDB tables, e.g. to check encryption at rest: every
 * thread on the server is the customer's or the agent's) and RELOAD (FLUSH TABLES ... FOR
 * EXPORT); the global privileges come without GRANT OPTION, so linroot cannot pass them on.
 * Withheld: FILE, SUPER, SHUTDOWN, SET USER (a DEFINER of root), CONNECTION ADMIN, READ_ONLY ADMIN, every replication and
 * binlog privilege, FEDERATED ADMIN, CREATE TABLESPACE.
 */
export const ADMIN_SCHEMA_PRIVILEGES = [
  'SELECT', 'INSERT', 'UPDATE', 'DELETE', 'CREATE', 'DROP', 'REFERENCES', 'INDEX', 'ALTER',
  'CREATE TEMPORARY TABLES', 'LOCK TABLES', 'EXECUTE', 'CREATE VIEW', 'SHOW VIEW', 'CREATE ROUTINE',
  'ALTER ROUTINE', 'EVENT', 'TRIGGER', 'DELETE HISTORY',
].join(', ');
export const ADMIN_GLOBAL_PRIVILEGES = 'CREATE USER, SHOW DATABASES, PROCESS, RELOAD';
/** Bumped whenever the grants above change, so existing accounts are re-granted (state.accountsKey). */
export const ADMIN_GRANTS_VERSION = 3;
/**
 * The replication account's privileges. Besides replicating, it reads everything: a member new on
 * another host whose primary has purged its binlog is seeded with a consistent copy of the
 * primary taken over TLS as this account (agent/database/dump-seed.ts). Reading adds no power
 * over the data it holds already (REPLICATION SLAVE streams every row the binlog still has, and a
 * replay from the first GTID rebuilds the whole database); SHOW VIEW, TRIGGER and EVENT are what
 * mariadb-dump needs to read views, triggers and events, and are the only ones here that could
 * also create schema objects (docs/security/mysql.md).
 */
export const REPL_PRIVILEGES = 'SELECT, SHOW VIEW, TRIGGER, EVENT, REPLICATION SLAVE, REPLICATION SLAVE ADMIN, REPLICA MONITOR, BINLOG MONITOR';

/**
 * The MariaDB account host for one allow_list entry. MariaDB 10.11 does not accept `/24` in
 * account hosts, only `base/netmask`, and the base must be the network address. `0.0.0.0/0`
 * becomes `%`; a bare address or /32 becomes the address itself. Returns undefined for a
 * malformed entry (the control plane validates; this is a guard).
 */
export function accountHost(entry: string): string | undefined {
  const range = parseCidr(entry.trim());
  if (!range) return undefined;
  if (range.prefix === 0) return '%';
  const net = formatIpv4(range.network);
  return range.prefix === 32 ? net : `${net}/${formatIpv4(prefixMask(range.prefix))}`;
}

/** The set of linroot account hosts an allow_list calls for (sorted, deduplicated). */
export function desiredAdminHosts(allowList: string[]): string[] {
  return [...new Set(allowList.map(accountHost).filter((h): h is string => h !== undefined))].sort();
}

/**
 * Makes the linroot accounts mirror the allow_list with `password` (defence in depth behind the
 * data plane's endpoint, which passes the client's address with the PROXY protocol). Runs on the primary
 * with the binlog on, so replicas follow. Every account is re-granted from scratch, so an account
 * made by an older agent with `ALL ON *.*` ends with exactly the grants above (without READ_ONLY
 * ADMIN, linroot cannot write to a read-only replica through hosts.secondary).
 */
export async function syncAdminAccounts(c: AdminConnection, allowList: string[], password: string): Promise<void> {
  const want = desiredAdminHosts(allowList);
  const have = (await q(c, 'SELECT Host FROM mysql.user WHERE User = ?', [ADMIN_USER])).map((r) => String(r.Host));
  for (const host of have.filter((h) => !want.includes(h))) {
    await c.query('DROP USER ?@?', [ADMIN_USER, host]);
  }
  for (const host of want) {
    if (have.includes(host)) {
      await c.query('ALTER USER ?@? IDENTIFIED BY ? ACCOUNT UNLOCK', [ADMIN_USER, host, password]);
      await c.query('REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@?', [ADMIN_USER, host]);
    } else {
      await c.query('CREATE USER ?@? IDENTIFIED BY ?', [ADMIN_USER, host, password]);
    }
    await grantAdmin(c, host);
  }
}

/** linroot@host's designed grants, on an account holding none. */
async function grantAdmin(c: AdminConnection, host: string): Promise<void> {
  await c.query(`GRANT ${ADMIN_GLOBAL_PRIVILEGES} ON *.* TO ?@?`, [ADMIN_USER, host]);
  await c.query(`GRANT ${ADMIN_SCHEMA_PRIVILEGES} ON \`%\`.* TO ?@? WITH GRANT OPTION`, [ADMIN_USER, host]);
  await c.query('GRANT SELECT ON mysql.* TO ?@?', [ADMIN_USER, host]);
}

/**
 * ADMIN_GLOBAL_PRIVILEGES as mysql.global_priv stores them (`access`, MariaDB's privilege bits:
 * RELOAD 1<<6, PROCESS 1<<8, SHOW DATABASES 1<<14, CREATE USER 1<<25), without GRANT OPTION (1<<10).
 */
export const ADMIN_GLOBAL_ACCESS = String((1 << 6) | (1 << 8) | (1 << 14) | (1 << 25));
/** The mysql.db columns ADMIN_SCHEMA_PRIVILEGES (and its GRANT OPTION) set on `%`; every other one stays N. */
const ADMIN_SCHEMA_COLUMNS = new Set([
  'Select_priv', 'Insert_priv', 'Update_priv', 'Delete_priv', 'Create_priv', 'Drop_priv', 'Grant_priv', 'References_priv',
  'Index_priv', 'Alter_priv', 'Create_tmp_table_priv', 'Lock_tables_priv', 'Create_view_priv', 'Show_view_priv',
  'Create_routine_priv', 'Alter_routine_priv', 'Execute_priv', 'Event_priv', 'Trigger_priv', 'Delete_history_priv',
]);

/** Whether one mysql.db row of linroot is one grantAdmin makes (`%` as designed, or `mysql` read-only). */
function designedSchemaRow(r: Record<string, unknown>): boolean {
  const privs = Object.keys(r).filter((k) => k.endsWith('_priv'));
  if (r.Db === '%') return privs.every((k) => (String(r[k]) === 'Y') === ADMIN_SCHEMA_COLUMNS.has(k));
  if (r.Db === 'mysql') return privs.every((k) => (String(r[k]) === 'Y') === (k === 'Select_priv'));
  return false;
}

/**
 * The linroot accounts whose privileges differ from the designed set (grantAdmin): global
 * privileges other than exactly ADMIN_GLOBAL_ACCESS (SUPER, FILE, GRANT OPTION added by a root
 * session, or something revoked: linroot's CREATE USER lets it REVOKE ALL from itself), schema
 * grants other than `%` and the read-only `mysql`, any table, column, routine or proxy grant, or
 * a role holding global privileges. Read from the privilege tables, not SHOW GRANTS.
 */
export async function adminGrantsDrift(c: AdminConnection): Promise<string[]> {
  const hosts = (await q(c, "SELECT Host, JSON_VALUE(Priv, '$.access') AS access, IFNULL(JSON_VALUE(Priv, '$.default_role'), '') AS role FROM mysql.global_priv WHERE User = ?", [ADMIN_USER]));
  const wrong = new Set<string>();
  for (const h of hosts) if (String(h.access) !== ADMIN_GLOBAL_ACCESS || String(h.role) !== '') wrong.add(String(h.Host));
  const schema = await q(c, 'SELECT * FROM mysql.db WHERE User = ?', [ADMIN_USER]);
  for (const h of hosts) {
    const rows = schema.filter((r) => r.Host === h.Host);
    if (rows.length !== 2 || !rows.every(designedSchemaRow)) wrong.add(String(h.Host));
  }
  for (const t of ['tables_priv', 'columns_priv', 'procs_priv', 'proxies_priv']) {
    for (const r of await q(c, `SELECT DISTINCT Host FROM mysql.${t} WHERE User = ?`, [ADMIN_USER])) wrong.add(String(r.Host));
  }
  // Roles linroot creates are its own to hold (CREATE ROLE grants them to their creator); one
  // with global privileges can only have come from root.
  const roles = await q(c,
    `SELECT m.Host FROM mysql.roles_mapping m JOIN mysql.global_priv r ON r.User = m.Role AND r.Host = ''
      WHERE m.User = ? AND IFNULL(JSON_VALUE(r.Priv, '$.access'), 0) <> 0`, [ADMIN_USER]);
  for (const r of roles) wrong.add(String(r.Host));
  return [...wrong].filter((h) => hosts.some((x) => x.Host === h)).sort();
}

/**
 * Puts linroot@host back to the designed grants, node-locally (each node's guard repairs its
 * own copy; a write on a replica must not make GTIDs of its own): every privilege and grant
 * option revoked, roles with global privileges revoked, no default role, then grantAdmin.
 */
export async function repairAdminGrants(c: AdminConnection, host: string): Promise<void> {
  await c.query('SET SESSION sql_log_bin=0');
  try {
    await c.query('REVOKE ALL PRIVILEGES, GRANT OPTION FROM ?@?', [ADMIN_USER, host]);
    const roles = await q(c,
      `SELECT m.Role FROM mysql.roles_mapping m JOIN mysql.global_priv r ON r.User = m.Role AND r.Host = ''
        WHERE m.User = ? AND m.Host = ? AND IFNULL(JSON_VALUE(r.Priv, '$.access'), 0) <> 0`, [ADMIN_USER, host]);
    for (const r of roles) await c.query('REVOKE ? FROM ?@?', [r.Role, ADMIN_USER, host]);
    await c.query('SET DEFAULT ROLE NONE FOR ?@?', [ADMIN_USER, host]);
    await c.query('DELETE FROM mysql.proxies_priv WHERE User = ? AND Host = ?', [ADMIN_USER, host]);
    await c.query('FLUSH PRIVILEGES');
    await grantAdmin(c, host);
  } finally {
    await c.query('SET SESSION sql_log_bin=1');
  }
}

/** The replication account, created node-locally on every node (identical everywhere). */
export async function ensureReplicationUser(c: AdminConnection, password: string, ssl: boolean): Promise<void> {
  await c.query('SET SESSION sql_log_bin=0');
  try {
    await c.query("CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ?", [REPL_USER, password]);
    await c.query("ALTER USER ?@'%' IDENTIFIED BY ? ACCOUNT UNLOCK", [REPL_USER, password]);
    await c.query(`ALTER USER ?@'%' ${ssl ? 'REQUIRE SSL' : 'REQUIRE NONE'}`, [REPL_USER]);
    await c.query(`GRANT ${REPL_PRIVILEGES} ON *.* TO ?@'%'`, [REPL_USER]);
  } finally {
    await c.query('SET SESSION sql_log_bin=1');
  }
}

/**
 * True when the replication account is as the agent made it (present, unlocked, its password,
 * its privileges). linroot holds CREATE USER, which in MariaDB covers every account, so a
 * customer can drop or change it; the agent checks on every observation and repairs.
 */
export async function replicationUserIntact(c: AdminConnection, password: string): Promise<boolean> {
  const rows = await q(c,
    `SELECT JSON_VALUE(Priv, '$.authentication_string') = PASSWORD(?) AS pw,
            IFNULL(JSON_VALUE(Priv, '$.account_locked'), 'false') AS locked
       FROM mysql.global_priv WHERE User = ? AND Host = '%'`, [password, REPL_USER]);
  const r = rows[0];
  if (!r || Number(r.pw) !== 1 || String(r.locked) === 'true') return false;
  const grants = (await q(c, "SHOW GRANTS FOR ?@'%'", [REPL_USER])).map((g) => String(Object.values(g)[0]));
  // An account made before it could read (no SELECT) is re-granted too.
  return grants.some((g) => g.startsWith('GRANT SELECT,') && g.includes('SHOW VIEW') && g.includes('REPLICATION SLAVE ADMIN') && g.includes('BINLOG MONITOR'));
}
