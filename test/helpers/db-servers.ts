import { readdirSync, readFileSync } from 'node:fs';
import { basename, resolve, sep } from 'node:path';

/** A MariaDB/MySQL server process seen in /proc. */
export interface DbServer {
  pid: number;
  /** The program as started (argv[0]). */
  binary: string;
  /** Its `--datadir=` option, undefined when it was started without one. */
  datadir: string | undefined;
  /** `mariadb-install-db`'s short-lived server that fills a new data directory. */
  bootstrap: boolean;
  args: string[];
}

const SERVER_BINARIES = new Set(['mariadbd', 'mysqld']);

function read(pid: string, file: string): string | undefined {
  try {
    return readFileSync(`/proc/${pid}/${file}`, 'utf8');
  } catch {
    // The process ended while we looked, or is not ours to read.
    return undefined;
  }
}

/**
 * Every live MariaDB/MySQL *server* on the machine: the program itself is `mariadbd` or
 * `mysqld`. Matching the whole command line instead also catches the agent's client tools
 * (`mariadb-backup`, `mariadb-binlog`, `mariadb-dump` are all started with
 * `--socket=.../run/mysqld.sock`), which run for a few seconds right after a database is created
 * (the binlog archive's first base backup) and once made a count of servers read 2.
 */
export function dbServers(): DbServer[] {
  const out: DbServer[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    const cmd = read(p, 'cmdline');
    if (!cmd) continue;
    const [binary = '', ...args] = cmd.split('\0').filter((a) => a !== '');
    if (!SERVER_BINARIES.has(basename(binary))) continue;
    // A zombie has released everything (its data directory included); only its parent's wait is due.
    if (/^\d+ \(.*\) Z/.test(read(p, 'stat') ?? '')) continue;
    const datadir = args.find((a) => a.startsWith('--datadir='))?.slice('--datadir='.length);
    out.push({ pid: Number(p), binary, datadir, bootstrap: args.includes('--bootstrap'), args });
  }
  return out;
}

/** True when `path` is `dir` or inside it. */
export function isUnder(path: string, dir: string): boolean {
  const a = resolve(path);
  const b = resolve(dir);
  return a === b || a.startsWith(b.endsWith(sep) ? b : b + sep);
}

/** Pids of the servers whose data directory is inside `dir`. */
export function serversUnder(dir: string): number[] {
  return dbServers().filter((s) => s.datadir !== undefined && isUnder(s.datadir, dir)).map((s) => s.pid);
}

/**
 * The environment variable test/helpers/server-leak-guard.ts sets to a token of its own in each
 * test file's worker. Every process started from that file inherits it (the process runtime
 * passes its environment on to mariadbd, labs and agents pass theirs on), and /proc keeps it
 * whatever becomes of the parent: a server whose agent died is still known by it.
 */
export const OWNER_VAR = 'FULCRUM_TEST_OWNER';

/** The servers started (directly or through agents and labs) with `OWNER_VAR=token`. */
export function ownedServers(token: string): DbServer[] {
  const marker = `${OWNER_VAR}=${token}`;
  return dbServers().filter((s) => (read(String(s.pid), 'environ') ?? '').split('\0').includes(marker));
}
