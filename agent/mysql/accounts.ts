import type { AdminConnection } from './admin.js';
import { q } from './admin.js';

export const ADMIN_USER = 'linroot';
export const REPL_USER = 'fulcrum_repl';

/**
 * The MariaDB account host for one allow_list entry. MariaDB 10.11 does not accept `/24` in
 * account hosts, only `base/netmask` (reference mysql-dbaas §6), and the base must be the
 * network address. `0.0.0.0/0` becomes `%`; a bare address or /32 becomes the address itself.
 * Returns undefined for a malformed entry (the control plane validates; this is a guard).
 */
export function accountHost(entry: string): string | undefined {
  const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})(?:\/(\d{1,2}))?$/.exec(entry.trim());
  if (!m) return undefined;
  const octets = m.slice(1, 5).map(Number);
  const prefix = m[5] === undefined ? 32 : Number(m[5]);
  if (octets.some((o) => o > 255) || prefix > 32) return undefined;
  if (prefix === 0) return '%';
  const ip = ((octets[0]! << 24) | (octets[1]! << 16) | (octets[2]! << 8) | octets[3]!) >>> 0;
  const mask = prefix === 32 ? 0xffffffff : (~((1 << (32 - prefix)) - 1)) >>> 0;
  const net = (ip & mask) >>> 0;
  const dotted = (n: number) => [24, 16, 8, 0].map((s) => (n >>> s) & 255).join('.');
  return prefix === 32 ? dotted(net) : `${dotted(net)}/${dotted(mask)}`;
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
