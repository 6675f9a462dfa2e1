import { systemClock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import { adminGrantsDrift, ensureReplicationUser, repairAdminGrants, replicationUserIntact } from '../mysql/accounts.js';
import { q, type AdminConnection } from '../mysql/admin.js';
import { PIN_MYSQL_SCHEMA } from '../mysql/init-sql.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';

/** MariaDB's answers when root@localhost's password was changed, or the account dropped or locked. */
const LOCKED_OUT = new Set(['ER_ACCESS_DENIED_ERROR', 'ER_ACCOUNT_HAS_BEEN_LOCKED']);
/** A node restarted to repair its accounts is not restarted again sooner than this. */
const RESTART_EVERY_MS = 60_000;
const restarted = new Map<string, number>();

/**
 * linroot needs CREATE USER to manage users, and in MariaDB 10.11 that privilege covers every
 * account: a customer can drop or alter root@localhost and fulcrum_repl (docs/security/mysql.md).
 * This detects and repairs it on every observation. Inside a working root session: the
 * replication account is re-made when it is not as the agent made it; an account given a schema
 * pattern that matches `mysql` gets a read-only grant on `mysql` (PIN_MYSQL_SCHEMA); root
 * stripped of its grants means a restart; linroot holding anything but its designed privileges
 * (a root session granted it SUPER or ALL ... WITH GRANT OPTION, or it revoked its own) is put
 * back to them, node-locally. `lockedOut` tells a connection error that means root itself was
 * changed; the node is then restarted, and its init file (agent/mysql/init-sql.ts) restores
 * both accounts before the first connection.
 */
export async function guardSession(c: AdminConnection, replPassword: string, log?: Pick<Logger, 'warn'>): Promise<'ok' | 'restart'> {
  const grants = (await q(c, 'SHOW GRANTS FOR CURRENT_USER()')).map((g) => String(Object.values(g)[0]));
  if (!grants.some((g) => g.startsWith('GRANT ALL PRIVILEGES ON *.*') && g.includes('WITH GRANT OPTION'))) return 'restart';
  if (!(await replicationUserIntact(c, replPassword))) await ensureReplicationUser(c, replPassword, true);
  for (const host of await adminGrantsDrift(c)) {
    log?.warn({ host }, 'linroot privileges differ from the designed set: repairing');
    await repairAdminGrants(c, host);
  }
  const exposed = await q(c, "SELECT 1 FROM mysql.db d WHERE 'mysql' LIKE d.Db AND d.Db <> 'mysql' AND NOT EXISTS (SELECT 1 FROM mysql.db e WHERE e.Host = d.Host AND e.User = d.User AND e.Db = 'mysql') LIMIT 1");
  if (exposed.length > 0) {
    await c.query('SET SESSION sql_log_bin=0');
    try {
      await c.query(PIN_MYSQL_SCHEMA);
      await c.query('FLUSH PRIVILEGES');
    } finally {
      await c.query('SET SESSION sql_log_bin=1');
    }
  }
  return 'ok';
}

export function lockedOut(err: unknown): boolean {
  return LOCKED_OUT.has(String((err as { code?: string }).code));
}

/** Restarts node `name` (graceful stop, start) unless it was restarted for this less than a minute ago. */
export async function restartForRepair(runtime: ContainerRuntime, name: string, log: Logger, why: string): Promise<void> {
  const now = systemClock.now();
  if (now - (restarted.get(name) ?? 0) < RESTART_EVERY_MS) return;
  restarted.set(name, now);
  log.warn({ node: name, why }, 'system accounts changed: restarting the node to repair them');
  await runtime.stop(name);
  await runtime.start(name);
}
