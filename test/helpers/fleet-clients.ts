/**
 * Clients of a database fleet on network-namespace hosts (fleet-hosts.ts): mysql2 run inside a
 * host, the write loop's attempts, and what they say about pauses and lost rows. No vitest here:
 * bench/provision/replace.ts uses them under plain Node.
 */
import { repoRoot, until } from './lab.js';
import { printedJson, watch, type Host, type HostProcess } from './hosts.js';
import type { Fleet } from './fleet-hosts.js';

export const MYSQL = '/v4/databases/mysql/instances';

/**
 * mysql2 inside a host. `sql` mode runs the statements in argv and prints the last result as
 * JSON; `loop` mode inserts ids 1, 2, ... into fh.t, a new TLS connection per insert every 200 ms,
 * one JSON line per attempt (an insert is acknowledged when its line says ok).
 */
const MYSQL_CLIENT = `
const mysql = require('mysql2/promise');
const { DB_HOST: host, DB_USER: user, DB_PASSWORD: password, DB_CA: ca } = process.env;
const [mode, ...stmts] = process.argv.slice(1);
const open = () => mysql.createConnection({ host, port: 3306, user, password, ssl: { ca, rejectUnauthorized: true }, connectTimeout: 2000 });
function within(ms, p) { return Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error('timeout')), ms))]); }
async function sql() {
  const c = await open();
  let last;
  for (const s of stmts) [last] = await c.query(s);
  await c.end();
  console.log(JSON.stringify(last));
}
async function loop() {
  for (let id = 1; ; id++) {
    const start = Date.now();
    let c;
    try {
      c = await within(4000, open());
      await within(4000, c.query('INSERT INTO fh.t (id) VALUES (?)', [id]));
      console.log(JSON.stringify({ id, start, end: Date.now(), ok: true }));
    } catch (e) {
      console.log(JSON.stringify({ id, start, end: Date.now(), ok: false, err: e.code || e.message }));
    }
    if (c) c.destroy();
    await new Promise((r) => setTimeout(r, 200));
  }
}
(mode === 'loop' ? loop() : sql()).catch((e) => { console.error(e.code || e.message); process.exit(2); });
`;

export interface Attempt { id: number; start: number; end: number; ok: boolean; err?: string }

export interface MysqlClient {
  /** Runs statements through `host`; the last result, or undefined when anything failed. */
  sql(...stmts: string[]): Promise<any>;
  /** Starts the write loop into fh.t. */
  loop(): HostProcess;
}

/** mysql2 clients run inside `client`, talking to `host` (hosts.primary) with the database's credentials and CA. */
export async function mysqlClient(call: Fleet['call'], client: Host, id: number, host: string): Promise<MysqlClient> {
  const creds = (await call('GET', `${MYSQL}/${id}/credentials`)).body as { username: string; password: string };
  const ca = Buffer.from((await call('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate, 'base64').toString('utf8');
  const env = { ...process.env, DB_HOST: host, DB_USER: creds.username, DB_PASSWORD: creds.password, DB_CA: ca };
  return {
    async sql(...stmts) {
      const p = watch(client.spawn(process.execPath, ['-e', MYSQL_CLIENT, 'sql', ...stmts], { cwd: repoRoot, env }));
      const code = await new Promise<number | null>((ok) => p.proc.once('close', (c) => ok(c)));
      return code === 0 ? JSON.parse(p.output().trim().split('\n').at(-1)!) : undefined;
    },
    loop: () => watch(client.spawn(process.execPath, ['-e', MYSQL_CLIENT, 'loop'], { cwd: repoRoot, env })),
  };
}

/** The longest time between two consecutive acknowledged writes that end after `from` (and start before `to`). */
export function longestPause(list: Attempt[], from: number, to: number): number {
  const ends = list.filter((a) => a.ok && a.end >= from && a.start <= to).map((a) => a.end).sort((x, y) => x - y);
  let worst = 0;
  for (let i = 1; i < ends.length; i++) worst = Math.max(worst, ends[i]! - ends[i - 1]!);
  return worst;
}

export function attempts(p: HostProcess): Attempt[] {
  return printedJson<Attempt>(p);
}

/** The acknowledged ids of a write loop that are not in fh.t now (read through `client`). */
export async function lostRows(client: MysqlClient, loop: HostProcess): Promise<{ acked: number[]; missing: number[]; stored: Set<number> }> {
  const acked = attempts(loop).filter((a) => a.ok).map((a) => a.id);
  const rows = await until('the rows read back', () => client.sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
  const stored = new Set((rows as { id: number }[]).map((r) => r.id));
  return { acked, missing: acked.filter((i) => !stored.has(i)), stored };
}
