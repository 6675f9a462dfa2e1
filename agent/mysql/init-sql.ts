import { REPL_PRIVILEGES, REPL_USER } from './accounts.js';

/**
 * Global privilege bits (mysql.global_priv `access`, MariaDB 10.11) an account other than the
 * agent's may hold: linroot's CREATE USER, SHOW DATABASES, PROCESS and RELOAD (which it cannot
 * pass on). Anything else there was written into the grant tables directly
 * (docs/security/mysql.md) and is stripped at start.
 */
const CUSTOMER_GLOBAL_ACCESS = (1 << 25) + (1 << 14) + (1 << 8) + (1 << 6);

/**
 * A schema grant on a pattern that matches `mysql` (linroot may grant `%` to accounts it makes)
 * would let that account write the system schema: MariaDB uses the most specific matching
 * schema grant, so an explicit read-only grant on `mysql` for every such account closes it.
 * Run at start and on every observation (agent/database/guard.ts); node-local.
 */
export const PIN_MYSQL_SCHEMA =
  "INSERT INTO mysql.db (Host, Db, User, Select_priv) SELECT DISTINCT d.Host, 'mysql', d.User, 'Y' FROM mysql.db d" +
  " WHERE 'mysql' LIKE d.Db AND d.Db <> 'mysql'" +
  " AND NOT EXISTS (SELECT 1 FROM mysql.db e WHERE e.Host = d.Host AND e.User = d.User AND e.Db = 'mysql')";

/** A string literal for the init file (which takes no parameters). */
function lit(s: string): string {
  return `'${s.replace(/\\/g, '\\\\').replace(/'/g, "\\'")}'`;
}

/**
 * The server's init file (`init_file`, run on every start before the first connection is
 * accepted), so that root@localhost never runs with the template's empty password and every
 * start repairs what a customer holding CREATE USER could have done to the agent's accounts:
 * root and the replication account re-created, unlocked, with their passwords and grants;
 * install-db's other accounts and any account under the reserved names removed; privileges
 * written into the grant tables by hand stripped; plugin rows dropped (Fulcrum loads its
 * plugins from the option file). Node-local: nothing of it goes to the binlog.
 */
export function renderInitSql(p: { adminPassword: string; replPassword: string }): string {
  const admin = lit(p.adminPassword);
  const repl = lit(p.replPassword);
  return [
    'SET SESSION sql_log_bin=0;',
    "DELETE FROM mysql.global_priv WHERE User IN ('root', 'mysql', '') AND NOT (User = 'root' AND Host = 'localhost');",
    "DELETE FROM mysql.proxies_priv WHERE NOT (User = 'root' AND Host = 'localhost');",
    `UPDATE mysql.global_priv SET Priv = JSON_SET(Priv, '$.access', CAST(JSON_VALUE(Priv, '$.access') AS UNSIGNED) & ${CUSTOMER_GLOBAL_ACCESS})` +
      " WHERE NOT (User = 'root' AND Host = 'localhost') AND NOT (User = 'mariadb.sys' AND Host = 'localhost');",
    `UPDATE mysql.global_priv SET Priv = JSON_SET(Priv, '$.access', 0) WHERE User = '${REPL_USER}';`,
    'DELETE FROM mysql.plugin;',
    `${PIN_MYSQL_SCHEMA};`,
    'FLUSH PRIVILEGES;',
    `CREATE USER IF NOT EXISTS 'root'@'localhost' IDENTIFIED BY ${admin};`,
    `ALTER USER 'root'@'localhost' IDENTIFIED BY ${admin} REQUIRE NONE ACCOUNT UNLOCK;`,
    "GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION;",
    `CREATE USER IF NOT EXISTS '${REPL_USER}'@'%' IDENTIFIED BY ${repl};`,
    `ALTER USER '${REPL_USER}'@'%' IDENTIFIED BY ${repl} REQUIRE SSL ACCOUNT UNLOCK;`,
    `GRANT ${REPL_PRIVILEGES} ON *.* TO '${REPL_USER}'@'%';`,
    '',
  ].join('\n');
}
