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
 * The customer's accounts as SQL (CREATE OR REPLACE USER with the password hash, then the
 * grants), for backups and for seeding a rebuilt node. The agent's own accounts are left out:
 * they come from the desired state.
 */
export async function customerAccountsSql(c: AdminConnection): Promise<string> {
  const out: string[] = ['-- Fulcrum: customer accounts', ''];
  for (const u of await q(c, 'SELECT User, Host FROM mysql.user')) {
    if (SYSTEM_USERS.includes(String(u.User))) continue;
    const create = String(Object.values((await q(c, 'SHOW CREATE USER ?@?', [u.User, u.Host]))[0] ?? {})[0] ?? '');
    if (!create) continue;
    out.push(`${create.replace(/^CREATE USER/, 'CREATE OR REPLACE USER')};`);
    for (const g of await q(c, 'SHOW GRANTS FOR ?@?', [u.User, u.Host])) out.push(`${String(Object.values(g)[0])};`);
  }
  return `${out.join('\n')}\n`;
}

/** The useful part of a MariaDB client's stderr: its ERROR line when it printed one. */
export function clientError(stderr: string): string {
  const line = /^ERROR .*$/m.exec(stderr);
  return (line ? line[0] : stderr.trim()).slice(0, 500);
}
