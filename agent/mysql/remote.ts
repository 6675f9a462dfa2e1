import mysql from 'mysql2/promise';
import { REPL_USER } from './accounts.js';

/** A member of the same cluster on another host, reached over the network. */
export interface RemoteMember {
  host: string;
  port: number;
  /** The replication account's password (shared by the cluster's members). */
  password: string;
  /** The cluster CA the member's server certificate must chain to. */
  caPem: string;
}

/**
 * Reads a few server variables of a member on another host as the replication account, over TLS
 * verified against the cluster CA and the address dialled (the same trust replication uses): the
 * agent cannot reach another host's Unix sockets, and needs only positions, never data.
 */
export async function remoteVariables(m: RemoteMember, names: string[]): Promise<Record<string, string>> {
  const c = await mysql.createConnection({
    host: m.host, port: m.port, user: REPL_USER, password: m.password, connectTimeout: 3000,
    ssl: { ca: m.caPem, rejectUnauthorized: true },
  });
  try {
    const select = names.map((n) => {
      if (!/^[a-z_]+$/.test(n)) throw new Error(`not a server variable: ${n}`);
      return `@@${n} AS ${n}`;
    });
    const [rows] = await c.query(`SELECT ${select.join(', ')}`);
    const row = (rows as Record<string, unknown>[])[0] ?? {};
    return Object.fromEntries(names.map((n) => [n, String(row[n] ?? '')]));
  } finally {
    await c.end().catch(() => c.destroy());
  }
}
