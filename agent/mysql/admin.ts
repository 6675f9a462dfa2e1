import mysql from 'mysql2/promise';

/**
 * Administrative sessions to a node go over its Unix socket as root@localhost: the socket is a
 * secure transport (require_secure_transport does not apply to it), is unreachable from the
 * network, and root@localhost matches nothing else.
 */
export interface AdminTarget {
  socketPath: string;
  password: string;
}

export type AdminConnection = mysql.Connection;

async function openAdmin(t: AdminTarget, timeoutMs = 5000): Promise<AdminConnection> {
  return mysql.createConnection({
    socketPath: t.socketPath,
    user: 'root',
    password: t.password,
    connectTimeout: timeoutMs,
    multipleStatements: false,
    supportBigNumbers: true,
    bigNumberStrings: true,
  });
}

export async function withAdmin<T>(t: AdminTarget, fn: (c: AdminConnection) => Promise<T>): Promise<T> {
  const c = await openAdmin(t);
  try {
    return await fn(c);
  } finally {
    await c.end().catch(() => c.destroy());
  }
}

export async function q(c: AdminConnection, sql: string, params?: unknown[]): Promise<any[]> {
  const [rows] = await c.query(sql, params);
  return Array.isArray(rows) ? (rows as any[]) : [];
}

/**
 * Makes root@localhost use `password`. A node fresh from the template has an empty root
 * password; later calls find the password already set. Node-local (sql_log_bin=0): every node
 * is bootstrapped by itself, so nothing here depends on replication having started.
 */
export async function secureRoot(socketPath: string, password: string): Promise<void> {
  try {
    const c = await openAdmin({ socketPath, password });
    await c.end();
    return;
  } catch (err) {
    if ((err as { code?: string }).code !== 'ER_ACCESS_DENIED_ERROR') throw err;
  }
  const c = await openAdmin({ socketPath, password: '' });
  try {
    await c.query('SET SESSION sql_log_bin=0');
    await c.query("ALTER USER 'root'@'localhost' IDENTIFIED BY ?", [password]);
    // install-db leaves other accounts (a socket-only 'mysql', root@<hostname>); a managed node
    // has no use for them.
    const [rows] = await c.query("SELECT User, Host FROM mysql.user WHERE User <> 'mariadb.sys' AND NOT (User = 'root' AND Host = 'localhost')");
    for (const r of rows as { User: string; Host: string }[]) await c.query('DROP USER ?@?', [r.User, r.Host]);
    await c.query("DELETE FROM mysql.proxies_priv WHERE NOT (User = 'root' AND Host = 'localhost')");
  } finally {
    await c.end().catch(() => c.destroy());
  }
}

/** Reads one global status variable ('' when absent). */
export async function globalStatus(c: AdminConnection, name: string): Promise<string> {
  const rows = await q(c, 'SHOW GLOBAL STATUS LIKE ?', [name]);
  return rows[0] ? String(rows[0].Value) : '';
}

/** The server's Unix socket path as the server itself sees it (inside its container or run folder). */
export async function serverSocket(c: AdminConnection): Promise<string> {
  return String((await q(c, 'SELECT @@socket AS s'))[0]?.s ?? '');
}
