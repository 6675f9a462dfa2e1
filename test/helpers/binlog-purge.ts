import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';

/**
 * Purges the binlog of database `id`'s node on `hostName` in a hosts fleet (state folder `dir`)
 * up to its newest file, as `expire_logs_days` would: replaying it from the first GTID can no
 * longer seed a member. Through the node's socket as the agent's root. Returns the GTID position
 * the remaining binlog starts at.
 */
export async function purgePrimaryBinlog(dir: string, hostName: string, id: number): Promise<string> {
  const node = readdirSync(join(dir, hostName, 'runtime', 'nodes')).find((n) => n.includes(`-db${id}-n`))!;
  const admin = await mysql.createConnection({
    socketPath: join(dir, hostName, 'runtime', 'nodes', node, 'run', 'mysqld.sock'), user: 'root',
    password: (JSON.parse(readFileSync(join(dir, hostName, 'databases', String(id), 'state.json'), 'utf8')) as { adminPassword: string }).adminPassword,
  });
  try {
    await admin.query('FLUSH BINARY LOGS');
    const [logs] = await admin.query('SHOW BINARY LOGS') as unknown as [{ Log_name: string }[]];
    await admin.query(`PURGE BINARY LOGS TO '${logs.at(-1)!.Log_name}'`);
    const [[first]] = await admin.query('SELECT BINLOG_GTID_POS(?, 4) AS pos', [logs.at(-1)!.Log_name]) as unknown as [{ pos: string }[]];
    return first!.pos;
  } finally {
    await admin.end();
  }
}
