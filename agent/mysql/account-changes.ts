import { q, type AdminConnection } from './admin.js';

/**
 * Whether the customer's accounts (or schemas) changed on a source while a copy of it was being
 * started (agent/database/dump-seed.ts). The privilege tables are not transactional, so a copy
 * reads them before its InnoDB snapshot; an account statement binlogged between that read and
 * the snapshot would make the copy's accounts disagree with its data's position. The source's
 * binlog between the two positions says whether there was one.
 */

/** A position in a server's binlog: a file and the offset of the next event in it. */
export interface BinlogPoint {
  file: string;
  pos: number;
}

/** Where the source's binlog ends now (SHOW MASTER STATUS); undefined when it has none. */
export async function binlogEnd(c: AdminConnection): Promise<BinlogPoint | undefined> {
  const r = (await q(c, 'SHOW MASTER STATUS'))[0];
  return r?.File ? { file: String(r.File), pos: Number(r.Position) } : undefined;
}

/**
 * The snapshot's binlog position as mariadb-dump `--master-data=1` prints it near the top of its
 * output (commented out with `--gtid`, whose GTID line comes at the end):
 * `-- CHANGE MASTER TO MASTER_LOG_FILE='db1-n1-bin.000003', MASTER_LOG_POS=385;`.
 */
export function dumpSnapshotPoint(head: string): BinlogPoint | undefined {
  // Only before the first schema's data (no customer text comes before it; customer strings
  // cannot start a line anyway, their newlines are escaped), and up to its `;`: read from a
  // stream, the number may have arrived only in part.
  const before = head.split(/^-- Current Database: /m)[0]!;
  const m = /^(?:-- )?CHANGE MASTER TO MASTER_LOG_FILE='([^'\n]+)', MASTER_LOG_POS=(\d+);$/m.exec(before);
  return m ? { file: m[1]!, pos: Number(m[2]) } : undefined;
}

/** The privilege tables an account lives in; a row event on one is an account change. */
const PRIVILEGE_TABLES = 'global_priv|user|db|tables_priv|columns_priv|procs_priv|proxies_priv|roles_mapping';
const TABLE_MAP = new RegExp(`\\(mysql\\.(${PRIVILEGE_TABLES})\\)\\s*$`);
const ACCOUNT_STATEMENT = /^(?:(?:CREATE(?:\s+OR\s+REPLACE)?|ALTER|DROP|RENAME)\s+(?:USER|ROLE)\b|GRANT\b|REVOKE\b|SET\s+(?:PASSWORD|DEFAULT\s+ROLE)\b)/i;
const SCHEMA_STATEMENT = /^(?:CREATE(?:\s+OR\s+REPLACE)?|DROP)\s+(?:DATABASE|SCHEMA)\b/i;

/**
 * Whether one binlog event (its SHOW BINLOG EVENTS type and info) changes what a copy reads
 * before its snapshot. The list of schemas to dump is read then too: a schema created in between
 * would be in neither the dump nor the binlog replayed after it. An account
 * statement (CREATE/ALTER/DROP/RENAME USER or ROLE, GRANT, REVOKE, SET PASSWORD, SET DEFAULT
 * ROLE: binlogged as statements whatever binlog_format is), or rows written to a privilege table
 * (linroot cannot, only root could); or CREATE/DROP DATABASE. The server prefixes `use \`db\`; ` when a schema was
 * selected; comments before the statement are skipped and version comments (`/*!100000 ... *\/`)
 * read as their content, as the server runs them.
 */
export function changesWhatIsReadFirst(type: string, info: string): boolean {
  if (type === 'Table_map') return TABLE_MAP.test(info);
  if (type !== 'Query') return false;
  let s = info.replace(/^use `(?:[^`]|``)*`; /, '');
  for (;;) {
    const next = s.trimStart()
      .replace(/^\/\*M?!\d*/, '')
      .replace(/^\/\*(?![M!])[\s\S]*?\*\//, '')
      .replace(/^(?:--\s|#)[^\n]*(?:\n|$)/, '');
    if (next === s) break;
    s = next;
  }
  s = s.trimStart();
  return ACCOUNT_STATEMENT.test(s) || SCHEMA_STATEMENT.test(s);
}

/** Events read per SHOW BINLOG EVENTS call. */
const PAGE = 1000;

/**
 * The positions of the changes to accounts or schemas (changesWhatIsReadFirst) binlogged from `from` (inclusive) up to `to` (exclusive),
 * reading the source's binlog through SHOW BINLOG EVENTS (BINLOG MONITOR, which the replication
 * account holds). Only positions: a statement's text may hold a password hash. Throws when the
 * range is no longer in the binlog (purged meanwhile).
 */
export async function accountChangesBetween(c: AdminConnection, from: BinlogPoint, to: BinlogPoint): Promise<string[]> {
  const logs = (await q(c, 'SHOW BINARY LOGS')).map((r) => String(r.Log_name));
  const first = logs.indexOf(from.file);
  const last = logs.indexOf(to.file);
  if (first < 0 || last < first) throw new Error(`the source's binlog no longer holds ${from.file} to ${to.file}`);
  const found: string[] = [];
  for (let i = first; i <= last; i++) {
    const file = logs[i]!;
    let pos = i === first ? from.pos : 4;
    for (;;) {
      if (file === to.file && pos >= to.pos) return found;
      const rows = await q(c, `SHOW BINLOG EVENTS IN ? FROM ${Math.floor(pos)} LIMIT ${PAGE}`, [file]);
      for (const r of rows) {
        if (file === to.file && Number(r.Pos) >= to.pos) return found;
        if (changesWhatIsReadFirst(String(r.Event_type), String(r.Info ?? ''))) found.push(`${file}:${Number(r.Pos)}`);
      }
      if (rows.length < PAGE) break;
      pos = Number(rows.at(-1)!.End_log_pos);
    }
  }
  return found;
}
