import { execFileSync } from 'node:child_process';
import { appendFileSync, chmodSync, chownSync, existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { repoRoot } from './lab.js';
import { freePort } from './tcp.js';

/** A private PostgreSQL cluster for one test file: its own folder, port and superuser. */
export interface PgCluster {
  port: number;
  /** A URL for a fresh, empty database of this cluster. */
  newDatabase(): Promise<string>;
  stop(): Promise<void>;
}

/** The bin folder of the newest PostgreSQL the Debian packages installed. */
function binDir(): string {
  const base = '/usr/lib/postgresql';
  const find = () => existsSync(base)
    ? readdirSync(base).filter((v) => existsSync(join(base, v, 'bin', 'initdb'))).sort((a, b) => Number(b) - Number(a))[0]
    : undefined;
  let v = find();
  if (!v) {
    // Not installed yet: install it the way every system dependency is installed.
    execFileSync('bash', [join(repoRoot, 'scripts', 'install-system-deps.sh')], { stdio: 'inherit' });
    v = find();
  }
  if (!v) throw new Error('PostgreSQL is not installed and scripts/install-system-deps.sh did not install it');
  return join(base, v, 'bin');
}

/** Runs a PostgreSQL tool as the postgres user when we are root (initdb refuses root). */
function asPostgres(tool: string, args: string[]): void {
  const root = process.getuid?.() === 0;
  if (root) execFileSync('runuser', ['-u', 'postgres', '--', tool, ...args], { stdio: 'pipe' });
  else execFileSync(tool, args, { stdio: 'pipe' });
}

/**
 * initdb + pg_ctl in a temp folder (prefix `hapg-`), listening on 127.0.0.1 and a free port, with
 * trust authentication for local connections only; `stop` shuts it down and removes the folder.
 * `extra` lets hosts in network namespaces reach it: it also listens on `extra.address` (the
 * root namespace's address on their bridge) and trusts connections from `extra.trust` (their
 * CIDR, which only namespaces on this machine can reach).
 */
export async function startPgCluster(extra?: { address: string; trust: string }): Promise<PgCluster> {
  const bin = binDir();
  const dir = mkdtempSync(join(tmpdir(), 'hapg-cluster-'));
  chmodSync(dir, 0o700);
  if (process.getuid?.() === 0) {
    const uid = Number(execFileSync('id', ['-u', 'postgres']).toString().trim());
    const gid = Number(execFileSync('id', ['-g', 'postgres']).toString().trim());
    chownSync(dir, uid, gid);
  }
  const data = join(dir, 'data');
  asPostgres(join(bin, 'initdb'), ['-D', data, '-U', 'postgres', '-A', 'trust', '--no-sync', '-E', 'UTF8']);
  if (extra) appendFileSync(join(data, 'pg_hba.conf'), `host all all ${extra.trust} trust\n`);
  const listen = extra ? `127.0.0.1,${extra.address}` : '127.0.0.1';
  let port = 0;
  for (let attempt = 0; ; attempt++) {
    port = await freePort();
    try {
      asPostgres(join(bin, 'pg_ctl'), ['-D', data, '-l', join(dir, 'log'), '-w', '-t', '120', 'start',
        '-o', `-p ${port} -k ${dir} -c listen_addresses=${listen} -c fsync=off -c max_connections=100`]);
      break;
    } catch (err) {
      if (attempt >= 3) throw err; // the port was taken between the probe and the start
    }
  }
  let n = 0;
  const admin = `postgres://postgres@127.0.0.1:${port}/postgres`;
  return {
    port,
    async newDatabase() {
      const name = `hapg_${process.pid}_${++n}`;
      const c = new pg.Client({ connectionString: admin });
      await c.connect();
      try {
        await c.query(`CREATE DATABASE ${name}`);
      } finally {
        await c.end();
      }
      return `postgres://postgres@127.0.0.1:${port}/${name}`;
    },
    async stop() {
      try {
        asPostgres(join(bin, 'pg_ctl'), ['-D', data, '-m', 'fast', '-w', 'stop']);
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    },
  };
}
