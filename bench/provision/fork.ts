/**
 * bench/provision, fork part: seconds from a fork's `POST /databases/mysql/instances` (with
 * `fork: {source, restore_time}`) to `active`, against the source's data size. The source (1 node,
 * process runtime unless asked otherwise) gets N MB of rows that compress like real tables; the bench waits for the agent's
 * archive round that follows (it archives the load's binlogs and, past PHYSICAL_REFRESH_BYTES of
 * them, takes a new physical base: docs/agent.md §6), then writes a binlog tail of small writes
 * over a few seconds; the fork asks for the last second of that tail, so it loads the newest
 * physical base and replays what follows it. Everything runs the real way, except that queries go
 * to the primary member itself (no data plane runs here). The agent's warnings always go to a
 * file in the bench's temp folder (named at the start, kept when not empty); a hidden base that
 * is a dump, or a fork loaded from anything but a physical base, fails the run at once (exit 1),
 * and so does a fork whose rows differ from the source's before its second (count and CRC32 sum).
 */
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from 'node:fs';
import { loadavg, tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { pino } from 'pino';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { startAgent, type RunningAgent } from '../../agent/main.js';
import { createLogger, silentLogger } from '../../lib/logger.js';
import { apiClient, stopAgentAndControlPlane } from '../common/fulcrum.js';
import { onStop } from '../common/stops.js';
import { bytesAfter, PHYSICAL_REFRESH_BYTES } from '../../agent/binlog/archiver.js';
import { gtidLe } from '../../agent/binlog/chain.js';

export interface ForkSample {
  mb: number; rows: number; tailRows: number; loadS: number; forkS: number; forkRows: number;
  /** Rows the source held before the fork's second (the fork must hold exactly these). */
  expectedRows: number;
  /** How the fork's base was loaded (physical or logical) and its stored size. */
  base: string; baseMb: number;
  /** The host's 1-minute load average when the fork became active (the machine is shared). */
  load1: number;
}

/** A fork whose base was not the kind the bench measures: the figures would not mean what they say. */
export class ForkBaseError extends Error {}
/** A fork that does not hold exactly the source's rows before its second. */
export class ForkContentError extends Error {}

/** Every manifest under a folder of the agent's backup storage. */
function manifests(dir: string): any[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((n) => /^\d+$/.test(n) && existsSync(join(dir, n, 'manifest.json')))
    .map((n) => JSON.parse(readFileSync(join(dir, n, 'manifest.json'), 'utf8')));
}

/**
 * True once the agent's archive holds the load (GTID position `pos`) the way its rounds leave it:
 * a physical base at or after it, or the load's binlogs archived with too few of them after the
 * newest physical base for a round to take another (the archiver's own rule).
 */
function archived(agentDir: string, dbId: number, pos: string, agentLog: string): boolean {
  const backups = manifests(join(agentDir, 'backups', String(dbId)));
  // The source is not encrypted, so every hidden base should be physical: a dump here means a
  // physical copy failed and forks would measure the slow path (minutes per GB).
  const dump = backups.find((m) => m.type === 'base' && !String(m.format).startsWith('mariadb-backup+'));
  if (dump) throw new ForkBaseError(`the agent took a logical base (backup ${dump.id}, ${dump.format}) for database ${dbId}: a physical copy failed; see ${agentLog}`);
  const segments = manifests(join(agentDir, 'backups', String(dbId), 'binlog'));
  const physical = backups.filter((m) => String(m.format).startsWith('mariadb-backup+')).sort((a, b) => a.finishedMs - b.finishedMs);
  const newest = physical.at(-1);
  if (!newest) return false;
  if (gtidLe(pos, newest.snapshotGtid)) return true;
  if (!segments.some((x) => gtidLe(pos, x.gtidEnd))) return false;
  const after = segments.reduce((n, x) => n + bytesAfter(x, newest), 0);
  return after < PHYSICAL_REFRESH_BYTES;
}

async function until<T>(fn: () => Promise<T | undefined>, timeoutMs: number, what: string): Promise<T> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch((e: Error) => (e.message === 'failed' || e instanceof ForkBaseError ? Promise.reject(e) : undefined));
    if (v !== undefined) return v;
    if (Date.now() > deadline) throw new Error(`timed out: ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const wire = (ms: number) => new Date(ms).toISOString().slice(0, 19);
/** Rows of about 1 KB each (see ROW_SQL). */
export const ROW_BYTES = 1000;
const WORDS = ['pending', 'shipped', 'delivered', 'returned', 'cancelled', 'refund', 'invoice', 'customer', 'warehouse', 'priority', 'standard', 'express'];
const word = `ELT(1 + FLOOR(RAND() * ${WORDS.length}), ${WORDS.map((w) => `'${w}'`).join(', ')})`;
/**
 * One row's columns after its key, made by the server: a category from a short list, a number,
 * and 32 fragments of `word=number:16 hex digits`. Random hex, random numbers and repeated words
 * compress about 2.3x with gzip, like ordinary tables; a repeated hash (compressing 25x) made the
 * base's copy, gzip and unpack look far cheaper than they are.
 */
export const ROW_SQL = `${word}, FLOOR(RAND() * 1000000), CONCAT_WS(' ', ${Array.from({ length: 32 }, () => `CONCAT(${word}, '=', FLOOR(RAND() * 100000), ':', LEFT(MD5(RAND()), 16))`).join(', ')})`;

/**
 * The bench's load of `mb` MB (fork.ts, store.ts, replace.ts): the statements that create app.t
 * and put the session in `app` (`setup`, run first and in the same session: MariaDB's sequence
 * engine reads seq_N_to_M in the current database), then the inserts of ids 1..rows made by the
 * server (ROW_SQL), in transactions of 50,000 rows. `at` is the second a later tail row was
 * written (the load's rows are all before a fork's second).
 */
export function loadSql(mb: number): { rows: number; setup: string[]; inserts: string[] } {
  const rows = Math.round((mb * 1024 * 1024) / ROW_BYTES);
  const inserts: string[] = [];
  for (let from = 1; from <= rows; from += 50_000) {
    inserts.push(`INSERT INTO app.t (id, cat, num, pad) SELECT seq, ${ROW_SQL} FROM seq_${from}_to_${Math.min(rows, from + 49_999)}`);
  }
  return {
    rows,
    setup: ['CREATE DATABASE app', 'CREATE TABLE app.t (id INT PRIMARY KEY, cat VARCHAR(16) NOT NULL, num INT NOT NULL, pad VARCHAR(1200) NOT NULL, at BIGINT NOT NULL DEFAULT 0)', 'USE app'],
    inserts,
  };
}
/** Every column of a row in one checksum, so a fork holding other values fails the comparison. */
export const TABLE_SUM = 'SELECT COUNT(*) AS n, COALESCE(SUM(CRC32(CONCAT_WS(\'|\', id, cat, num, pad, at))), 0) AS sum FROM app.t';

export async function measureForks(runtime: 'process' | 'docker', sizesMb: number[], onSample: (s: ForkSample) => void = () => undefined): Promise<ForkSample[]> {
  const cpDir = mkdtempSync(join(tmpdir(), 'bench-fork-cp-'));
  const agentDir = mkdtempSync(join(tmpdir(), 'bench-fork-agent-'));
  // The agent's warnings always go to a file that outlives the run (a failed physical copy says
  // why there); BENCH_FORK_LOG=1 also prints its whole log on stderr.
  const logDir = mkdtempSync(join(tmpdir(), 'bench-fork-log-'));
  const agentLog = join(logDir, 'agent-warnings.log');
  const verbose = Boolean(process.env.BENCH_FORK_LOG);
  const logStreams: pino.StreamEntry[] = [{ level: 'warn', stream: pino.destination({ dest: agentLog, sync: true }) }];
  if (verbose) logStreams.push({ level: 'info', stream: pino.destination(2) });
  console.log(`bench/provision fork: the agent's warnings go to ${agentLog}`);
  const octet = 100 + Math.floor(Math.random() * 150);
  let started: { cp?: ControlPlane; agent?: RunningAgent } = {};
  // The finally below and a signal (bench/common/stops.ts) run this same stop, once: the agent's
  // mariadbd processes (sessions of their own) or containers outlive the bench otherwise.
  const stop = onStop(`the ${runtime} agent's nodes, the control plane and their folders (fork part)`, async () => {
    const parts = started;
    started = {};
    await stopAgentAndControlPlane(parts, [cpDir, agentDir]);
    // Kept only when there is something to read.
    if (!existsSync(agentLog) || statSync(agentLog).size === 0) rmSync(logDir, { recursive: true, force: true });
    else console.log(`bench/provision fork: the agent logged warnings: ${agentLog}`);
  });
  const cp = (started.cp = await startControlPlane({ stateDir: cpDir, apiPort: 0, grpcPort: 0, databasePool: `127.78.${octet}.0/24`, logger: silentLogger() }));
  const joinToken = (await cp.context.fleet.createJoinToken({ role: 'agent', id: `bench-fork-${runtime}`, region: '*' })).token;
  started.agent = await startAgent({ join: joinToken, controlPlane: cp.grpcAddress, stateDir: agentDir, runtime, nodeAddressPool: `127.79.${octet}.0/24`, logger: createLogger('agent', { level: verbose ? 'info' : 'warn', destination: pino.multistream(logStreams) }) });
  const api = apiClient(cp.apiUrl, cp.adminToken);
  const get = (id: number) => api('GET', `/databases/mysql/instances/${id}`);
  const waitActive = (id: number, ms: number) => until(async () => {
    const d = await get(id);
    if (d.status === 'failed') throw new Error('failed');
    return d.status === 'active' ? d : undefined;
  }, ms, `database ${id} active`);
  const connect = async (d: any) => {
    const creds = await api('GET', `/databases/mysql/instances/${d.id}/credentials`);
    const ca = Buffer.from((await api('GET', `/databases/mysql/instances/${d.id}/ssl`)).ca_certificate, 'base64').toString();
    // Straight to the primary member: this bench runs no data plane to serve hosts.primary.
    const primary = Object.entries(d.members as Record<string, string>).find(([, role]) => role === 'primary')![0];
    return mysql.createConnection({ host: primary, port: d.port, user: creds.username, password: creds.password, ssl: { ca } });
  };
  const out: ForkSample[] = [];
  try {
    const a = await until(async () => (await api('GET', '/fulcrum/agents')).data.find((x: any) => x.connected && x.engines?.length), 30_000, 'agent');
    const engine = a.engines[0].id as string;
    for (const mb of sizesMb) {
      const src = await waitActive((await api('POST', '/databases/mysql/instances', {
        label: `bench-fork-src-${mb}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'],
      })).id, 120_000);
      const c = await connect(src);
      const load = loadSql(mb);
      const rows = load.rows;
      for (const stmt of load.setup) await c.query(stmt);
      const t0 = performance.now();
      for (const stmt of load.inserts) await c.query(stmt);
      const loadS = (performance.now() - t0) / 1000;
      const [[{ pos }]] = (await c.query('SELECT @@gtid_binlog_pos AS pos')) as any;
      await until(async () => (archived(agentDir, src.id, String(pos), agentLog) ? true : undefined), 1_800_000, 'the archive round after the load');
      // The binlog tail: small writes for 5 seconds after the backup.
      let tailRows = 0;
      const tailEnd = Date.now() + 5000;
      // UNIX_TIMESTAMP() is the statement's start, the same second the binlog stamps its events with.
      while (Date.now() < tailEnd) await c.query(`INSERT INTO app.t (id, cat, num, pad, at) SELECT ?, ${ROW_SQL}, UNIX_TIMESTAMP()`, [rows + ++tailRows]);
      const T = Math.floor((Date.now() - 1000) / 1000) * 1000;
      // What the fork must hold: every row stamped before second T (docs/databases.md, "Meaning of a second").
      const [[want]] = (await c.query(`${TABLE_SUM} WHERE at < ?`, [T / 1000])) as any;
      await c.end();
      await new Promise((r) => setTimeout(r, Math.max(0, T + 1100 - Date.now())));
      const f0 = performance.now();
      const fork = await api('POST', '/databases/mysql/instances', {
        label: `bench-fork-${mb}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'], fork: { source: src.id, restore_time: wire(T) },
      });
      const forked = await waitActive(fork.id, 1_800_000);
      const forkS = (performance.now() - f0) / 1000;
      const load1 = loadavg()[0]!;
      const fc = await connect(forked);
      const [[got]] = (await fc.query(TABLE_SUM)) as any;
      await fc.end();
      const forkBase = JSON.parse(readFileSync(join(agentDir, 'databases', String(fork.id), 'state.json'), 'utf8')).forkBase;
      const baseManifest = manifests(join(agentDir, 'backups', String(src.id))).find((m) => m.id === forkBase?.backupId);
      const sample: ForkSample = { mb, rows, tailRows, loadS, forkS, forkRows: Number(got.n), expectedRows: Number(want.n), base: forkBase?.kind ?? '?', baseMb: (baseManifest?.sizeBytes ?? 0) / 1048576, load1 };
      out.push(sample);
      onSample(sample);
      console.log(`fork of ${mb} MB (${rows} rows + ${tailRows} tail rows): active in ${forkS.toFixed(2)} s from a ${sample.base} base (backup ${forkBase?.backupId ?? '?'}, ${sample.baseMb.toFixed(1)} MB stored, ${(mb / Math.max(sample.baseMb, 0.001)).toFixed(1)}x smaller than the data), load average ${load1.toFixed(1)}; holds ${got.n} of ${want.n} rows expected, checksum ${String(got.sum) === String(want.sum) ? 'matches' : 'DIFFERS'}`);
      if (sample.forkRows !== sample.expectedRows || String(got.sum) !== String(want.sum)) {
        throw new ForkContentError(`the fork of ${mb} MB holds ${got.n} rows (checksum ${got.sum}) where the source held ${want.n} rows (checksum ${want.sum}) before ${wire(T)}`);
      }
      if (sample.base !== 'physical') throw new ForkBaseError(`the fork of ${mb} MB loaded a ${sample.base} base where a physical one was expected; see ${agentLog}`);
      for (const id of [fork.id, src.id]) await api('DELETE', `/databases/mysql/instances/${id}`);
      await until(async () => ((await api('GET', '/databases/mysql/instances')).results === 0 ? true : undefined), 120_000, 'deleted');
    }
  } finally {
    await stop();
  }
  return out;
}
