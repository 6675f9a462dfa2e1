import { formatIpv4, parseCidr, prefixMask } from '../../lib/ipv4.js';
import type { AdminConnection } from './admin.js';
import { q } from './admin.js';

export const ADMIN_USER = 'linroot';
export const REPL_USER = 'fulcrum_repl';

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
 * front proxy, which passes the client's address with the PROXY protocol). Runs on the primary
 * with the binlog on, so replicas follow. linroot gets every privilege except READ_ONLY ADMIN,
 * so it cannot write to a read-only replica through hosts.secondary.
 */
export async function syncAdminAccounts(c: AdminConnection, allowList: string[], password: string): Promise<void> {
  const want = desiredAdminHosts(allowList);
  const have = (await q(c, 'SELECT Host FROM mysql.user WHERE User = ?', [ADMIN_USER])).map((r) => String(r.Host));
  for (const host of have.filter((h) => !want.includes(h))) {
    await c.query('DROP USER ?@?', [ADMIN_USER, host]);
  }
  for (const host of want) {
    if (have.includes(host)) {
      await c.query('ALTER USER ?@? IDENTIFIED BY ?', [ADMIN_USER, host, password]);
    } else {
      await c.query('CREATE USER ?@? IDENTIFIED BY ?', [ADMIN_USER, host, password]);
      await c.query('GRANT ALL PRIVILEGES ON *.* TO ?@? WITH GRANT OPTION', [ADMIN_USER, host]);
      await c.query('REVOKE READ_ONLY ADMIN ON *.* FROM ?@?', [ADMIN_USER, host]);
    }
  }
}

/** The replication account, created node-locally on every node (identical everywhere). */
export async function ensureReplicationUser(c: AdminConnection, password: string, ssl: boolean): Promise<void> {
  await c.query('SET SESSION sql_log_bin=0');
  try {
    await c.query("CREATE USER IF NOT EXISTS ?@'%' IDENTIFIED BY ?", [REPL_USER, password]);
    await c.query("ALTER USER ?@'%' IDENTIFIED BY ?", [REPL_USER, password]);
    await c.query(`ALTER USER ?@'%' ${ssl ? 'REQUIRE SSL' : 'REQUIRE NONE'}`, [REPL_USER]);
    await c.query("GRANT REPLICATION SLAVE, REPLICATION SLAVE ADMIN, REPLICA MONITOR, BINLOG MONITOR ON *.* TO ?@'%'", [REPL_USER]);
  } finally {
    await c.query('SET SESSION sql_log_bin=1');
  }
}
