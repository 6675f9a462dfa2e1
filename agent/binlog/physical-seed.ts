import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { createHash } from 'node:crypto';
import { PassThrough, Transform, type Readable } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { crashPoint } from '../../lib/crash-point.js';
import { createDecryptStream, frameLimitOf } from '../backup/backup-crypto.js';
import { decompressor, storedFormat, type Codec } from '../backup/store-codec.js';
import type { BackupManifest, BackupStorage } from '../backup/backup-storage.js';
import { backupErrorTail, runFolders, scratch } from '../backup/physical-backup.js';
import type { DatabaseController } from '../database/controller.js';
import { NODE_PORT } from '../database/state.js';
import { ADMIN_USER, ensureReplicationUser, REPL_USER } from '../mysql/accounts.js';
import { globalStatus, q, serverSocket, withAdmin } from '../mysql/admin.js';
import { configureReplica, promote } from '../mysql/replication.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { chownTree, copyTree, entries, moveEntries, removeTree, withDir } from '../runtime/no-follow.js';

type Fork = Pick<DatabaseController, 'id' | 'state' | 'adminTarget' | 'nodeName'>;

/** What mariadb-backup leaves beside the data files; the server has no use for them. */
const BOOKKEEPING = /^(xtrabackup_|mariadb_backup_|backup-my\.cnf$|aria_log_control\.bak$)/;

/** Output chunk of the base's decompression (docs/performance.md, "Forks to a point in time"). */
const UNPACK_CHUNK = 256 * 1024;

/**
 * Puts a physical base (docs/agent.md §6, "Binlog archive and forks") into every node of a new
 * fork: the stream is unpacked (`mbstream -x`) and prepared (`mariadb-backup --prepare`) by the
 * fork primary's own engine, the same version as the source's, in its run folder. The copy
 * carries the source's system tables, so before any server runs it, its accounts are reset
 * offline (resetAccounts: root gets the fork's password, the source's root, linroot and
 * replication accounts are gone, and no trace of their password hashes is left in its files);
 * nothing of the source's needs to be known for that, so a fork on an agent that never ran the
 * source starts from the base as well. Every node is then stopped, its data directory replaced by
 * the prepared copy and started again; every node forgets the source's GTID state and replication
 * before the replicas are attached again: the fork's binlog starts empty, as a new server's does,
 * and the replay that follows reaches the replicas through replication.
 */
export async function seedPhysical(
  d: { runtime: ContainerRuntime; storage: BackupStorage },
  fork: Fork,
  source: { id: number; backupKey?: string },
  m: BackupManifest,
): Promise<Record<string, number>> {
  const { ms, step } = stepTimer();
  const s = fork.state!;
  const p = s.primary;
  const ks = s.addresses.map((_, i) => i + 1);
  const pName = fork.nodeName(p);
  const { socket, semiSync } = await withAdmin(await fork.adminTarget(p), async (x) => ({
    socket: await serverSocket(x),
    semiSync: String((await q(x, 'SELECT @@rpl_semi_sync_master_enabled AS v'))[0]?.v ?? '0') === '1',
  }));
  const { work, nodeWork, run, toolUid } = await unpackBase(d, pName, socket, source, m, step);
  try {
    await resetAccounts(d.runtime, pName, run, nodeWork, work, (await fork.adminTarget(p)).password, m.id);
    step('accountsMs');
    // Replicas get copies, the primary the prepared folder itself (same file system: a rename).
    for (const k of [...ks.filter((k) => k !== p), p]) await placeCopy(d.runtime, fork.nodeName(k), work, toolUid, k === p);
  } finally {
    await removeTree(work).catch(() => undefined);
  }
  step('placeMs');
  await Promise.all(ks.map((k) => d.runtime.start(fork.nodeName(k))));
  step('startMs');
  // The nodes now run the source's copy, with the fork's root and none of the source's accounts.
  crashPoint('fork-restarted');
  for (const k of ks) {
    const t = await fork.adminTarget(k);
    await withAdmin(t, async (x) => {
      await x.query('STOP SLAVE');
      await x.query('RESET SLAVE ALL');
      await x.query('RESET MASTER');
      await x.query("SET GLOBAL gtid_slave_pos=''");
      await ensureReplicationUser(x, s.replPassword, true);
    });
  }
  await withAdmin(await fork.adminTarget(p), (x) => promote(x, semiSync));
  const replicas = ks.filter((k) => k !== p);
  for (const k of replicas) {
    await withAdmin(await fork.adminTarget(k), (x) => configureReplica(x, { primaryHost: s.addresses[p - 1]!, primaryPort: NODE_PORT, password: s.replPassword }));
  }
  // A semi-sync primary holds each replayed commit until a replica acknowledges it: let the
  // replicas attach first, as provisioning does.
  if (semiSync && replicas.length > 0) {
    const deadline = Date.now() + 15_000;
    await withAdmin(await fork.adminTarget(p), async (x) => {
      while (Number(await globalStatus(x, 'Rpl_semi_sync_master_clients')) < replicas.length && Date.now() < deadline) {
        await new Promise((r) => setTimeout(r, 100));
      }
    });
  }
  step('resetMs');
  return ms;
}

/** A base unpacked, checked and prepared in a node's run folder (unpackBase). */
export interface PreparedBase {
  /** The prepared copy, on the agent's host; the caller removes it. */
  work: string;
  /** The same folder as the node sees it. */
  nodeWork: string;
  /** The node's run folder, on the host and as the node sees it. */
  run: { host: string; node: string };
  /** The uid the node's tools write as: only its files are taken from `work` (no-follow.ts). */
  toolUid: number;
}

/**
 * Downloads physical base `m` of database `source.id` into a scratch folder of node `name`'s run
 * folder (decrypted with the source's key, decompressed, `mbstream -x`, its checksum taken on the
 * way and a mismatch refused), prepares it with the node's own `mariadb-backup --prepare` and
 * removes what mariadb-backup leaves beside the data files. `socket` is the node's socket path as
 * the node reports it. On failure nothing is left behind; on success the caller removes `work`.
 */
export async function unpackBase(
  d: { runtime: ContainerRuntime; storage: BackupStorage },
  name: string,
  socket: string,
  source: { id: number; backupKey?: string },
  m: BackupManifest,
  step: (name: string) => void = () => undefined,
): Promise<PreparedBase> {
  const f = storedFormat(m.format);
  if (f?.kind !== 'mariadb-backup+mbstream') throw new Error(`base backup ${m.id} is not a physical copy`);
  const codec = f.codec;
  let key: string | undefined;
  let frameBytes: number | undefined;
  if (f.encrypted) {
    try {
      if (!source.backupKey) throw new Error('no backup key');
      frameBytes = frameLimitOf(m.encryption);
    } catch (err) {
      throw new Error(`base backup ${m.id} of database ${source.id} cannot be decrypted (${(err as Error).message})`);
    }
    key = source.backupKey;
  }
  const run = await runFolders(d.runtime, name, socket);
  const work = await scratch(run.host, 'fork-base');
  const nodeWork = join(run.node, 'fork-base');
  try {
    // The checksum is taken from the stored bytes on their way to mbstream (one read of the
    // object, not a second full download to verify it first); a mismatch refuses the copy here,
    // before it is prepared or placed, and the catch deletes what was unpacked.
    const got = await streamBase(d.storage.reader(source.id, m.id, m.file), { key, codec, frameBytes }, (stdin) => d.runtime.exec(name, ['mbstream', '-x', '-C', nodeWork], { stdin, noSocket: true }));
    if (got.exitCode === 0 && !got.readError && got.sha256 !== m.sha256) throw corrupted(m, got.sha256);
    if (got.exitCode !== 0 || got.readError) {
      // A changed object usually breaks the stream before its end (a frame fails authentication,
      // the decompressor finds a bad block): the checksum of the whole stored object, read again only on
      // this failure path, tells a corrupted base from a store or a tool that failed meanwhile.
      const sum = await storedChecksum(d.storage.reader(source.id, m.id, m.file)).catch(() => undefined);
      if (sum !== undefined && sum !== m.sha256) throw corrupted(m, sum);
      if (got.readError) throw new Error(`reading base backup ${m.id} failed: ${got.readError.message}`);
      throw new Error(`unpacking base backup ${m.id} failed: ${got.stderr.trim().split('\n').slice(-2).join(' ')}`);
    }
    step('unpackMs');
    const prep = await d.runtime.exec(name, ['mariadb-backup', '--prepare', `--target-dir=${nodeWork}`]);
    if (prep.exitCode !== 0) throw new Error(`preparing base backup ${m.id} failed: ${prep.stderr.trim().split('\n').slice(-3).join(' ')}`);
    step('prepareMs');
    // `work` is the node's, written by its uid (the tools run as the node): the agent reads,
    // moves and removes in it without following links, and takes only files that uid owns
    // (no-follow.ts), so a link or a hard link to a host file cannot end up in a data dir.
    const toolUid = (await stat(run.host)).uid;
    for (const e of await withDir(work, entries)) if (BOOKKEEPING.test(e)) await removeTree(join(work, e));
    return { work, nodeWork, run, toolUid };
  } catch (err) {
    await removeTree(work).catch(() => undefined);
    throw err;
  }
}

/**
 * Stops node `name` and replaces its data directory with the prepared copy in `work`: a copy of
 * it, or (`move`, same file system) its entries renamed, which empties `work`. The node's data
 * directory keeps its owner. The node is left stopped.
 */
export async function placeCopy(runtime: ContainerRuntime, name: string, work: string, toolUid: number, move: boolean): Promise<void> {
  const dataDir = (await runtime.inspect(name)).spec?.dataDir;
  if (!dataDir) throw new Error(`node ${name} has no data directory`);
  await runtime.stop(name);
  const owner = await stat(dataDir);
  for (const e of await withDir(dataDir, entries)) await removeTree(join(dataDir, e));
  if (move) await moveEntries(work, dataDir, toolUid);
  else await copyTree(work, dataDir, toolUid);
  await chownTree(dataDir, { uid: owner.uid, gid: owner.gid });
}

/**
 * Milliseconds per named step of a seed, each since the step before (a fork's and a member's
 * seeds log them; docs/performance.md reads them).
 */
export function stepTimer(): { ms: Record<string, number>; step: (name: string) => void } {
  const ms: Record<string, number> = {};
  let mark = Date.now();
  return { ms, step: (name) => { const now = Date.now(); ms[name] = now - mark; mark = now; } };
}

/** The error that names a base whose stored bytes are not the ones its manifest recorded. */
function corrupted(m: BackupManifest, got: string): Error {
  return new Error(`backup ${m.id} is corrupted: its checksum is ${got.slice(0, 12)}..., the manifest says ${m.sha256.slice(0, 12)}...; nothing was changed`);
}

/** SHA-256 of a stored object, read whole. */
async function storedChecksum(src: Readable): Promise<string> {
  const hash = createHash('sha256');
  for await (const chunk of src) hash.update(chunk as Buffer);
  return hash.digest('hex');
}

/** What streamBase saw: the stored bytes' SHA-256 (of what was read), mbstream's exit, and a failure of the read. */
export interface Unpacked {
  sha256: string;
  exitCode: number;
  stderr: string;
  readError?: Error;
}

/**
 * The stored base (`src`, its bytes as the store keeps them) hashed, decrypted with `key` when
 * it is encrypted (frames of at most `frameBytes`, the manifest's; the cap when not given), decompressed (`codec`: zstd
 * since bases are written so, gzip for older ones) and handed to `extract` (mbstream -x) as its
 * stdin, in one read.
 */
export async function streamBase(
  src: Readable, o: { key?: string; frameBytes?: number; codec: Codec }, extract: (stdin: Readable) => Promise<{ exitCode: number; stderr: string }>,
): Promise<Unpacked> {
  const decrypt = o.key !== undefined ? createDecryptStream(o.key, o.frameBytes) : undefined;
  const feed = new PassThrough();
  const hash = createHash('sha256');
  const tap = new Transform({ transform(chunk: Buffer, _enc, done) { hash.update(chunk); done(null, chunk); } });
  // 256 KiB output chunks instead of zlib's 16 KiB: a GB-sized base is cut into 16x fewer
  // pieces on its way to mbstream (1 GB: 5.4 s instead of 9.2 s, docs/performance.md).
  const gunzip = decompressor(o.codec, UNPACK_CHUNK);
  const feeding = (decrypt ? pipeline(src, tap, decrypt, gunzip, feed) : pipeline(src, tap, gunzip, feed)).then(() => undefined, (e: Error) => e);
  const x = await extract(feed).catch((err: unknown) => {
    // A program that never ran (its node gone) reads nothing: the read stops too, or the stored
    // object (a file, a connection to the object store) stays open behind the full pipe.
    feed.destroy();
    throw err;
  });
  const readError = await feeding;
  return { sha256: hash.digest('hex'), exitCode: x.exitCode, stderr: x.stderr, ...(readError ? { readError } : {}) };
}

/** The accounts of the source that the fork must not carry: the agent makes the fork's own. */
const SOURCE_ACCOUNTS = ['root', ADMIN_USER, REPL_USER];

/** Where the privilege tables keep accounts (MariaDB 10.4+; Aria tables, rebuilt below). */
const PRIVILEGE_TABLES = ['global_priv', 'db', 'tables_priv', 'columns_priv', 'procs_priv', 'proxies_priv', 'roles_mapping'];

/** What the server and its replication leave beside a copy taken from a replica (the source's replication password is in master.info). */
export const REPLICATION_FILES = /^(master.*\.info|multi-master\.info|relay-log.*\.info|.*-relay-bin\.(\d+|index))$/;

/** An SQL string literal (the server's default sql_mode: backslash escapes on). */
function literal(v: string): string {
  return `'${v.replace(/\\/g, '\\\\').replace(/'/g, "''")}'`;
}

/**
 * The SQL resetAccounts runs: the source's root, linroot and replication accounts deleted from
 * every privilege table; the tables rebuilt (ALTER TABLE ... FORCE writes new files, so the
 * deleted rows' password hashes are not left in free space of the old ones); root@localhost
 * made again as a fresh node has it, with the fork's password. The customer's own accounts stay,
 * as a logical fork's dump carries them; linroot is made by the provisioning that follows.
 */
export function resetAccountsSql(adminPassword: string): string {
  const users = SOURCE_ACCOUNTS.map(literal).join(', ');
  return [
    'FLUSH PRIVILEGES;',
    ...PRIVILEGE_TABLES.map((t) => `DELETE FROM mysql.${t} WHERE User IN (${users});`),
    ...PRIVILEGE_TABLES.map((t) => `ALTER TABLE mysql.${t} FORCE;`),
    'FLUSH PRIVILEGES;',
    `CREATE USER 'root'@'localhost' IDENTIFIED BY ${literal(adminPassword)};`,
    "GRANT ALL PRIVILEGES ON *.* TO 'root'@'localhost' WITH GRANT OPTION;",
    // GRANT PROXY checks the grantor's own proxy grant, and a bootstrap run has no user: the row
    // mariadb-install-db writes for root, as it writes it.
    "INSERT INTO mysql.proxies_priv VALUES ('localhost', 'root', '', '', 1, '', NOW());",
    'FLUSH PRIVILEGES;',
    '',
  ].join('\n');
}

/**
 * Gives the prepared copy the fork's accounts before any server serves it: the fork primary's
 * engine runs `mariadbd --bootstrap` on the copy, which reads SQL from its stdin, opens no socket
 * and no port, and exits when the input ends. Nobody can connect while the grant tables are not
 * in force (as with --skip-grant-tables), the fork's password goes through a pipe (never a file,
 * as an --init-file would need), and the source's passwords are never needed. After its clean
 * shutdown the Aria log, which holds images of the deleted rows (written by the source's server
 * and by this run), is removed with its control file: the fork's server starts a new one and
 * zero-fills the tables' old log positions (MariaDB does that for any Aria table moved between
 * servers). The replication state files of a copy taken from a replica go too.
 */
async function resetAccounts(
  runtime: ContainerRuntime, name: string, run: { host: string; node: string }, nodeWork: string, work: string, adminPassword: string, baseId: number,
): Promise<void> {
  const tmp = await scratch(run.host, 'fork-base-tmp');
  try {
    // The copy's redo log as it is (a different size would be rewritten for nothing).
    const redo = await stat(join(work, 'ib_logfile0')).then((x) => x.size, () => 0);
    const sql = new PassThrough();
    sql.end(resetAccountsSql(adminPassword));
    // --user=root matters only when the tool runs as root (a process runtime whose nodes run as
    // the agent's root): the server otherwise refuses to start; as any other uid it is ignored.
    const res = await runtime.exec(name, ['mariadbd', '--no-defaults', '--bootstrap', '--user=root', `--datadir=${nodeWork}`,
      `--tmpdir=${join(run.node, 'fork-base-tmp')}`, '--skip-networking', '--skip-log-bin', '--innodb-buffer-pool-size=64M',
      ...(redo > 0 ? [`--innodb-log-file-size=${redo}`] : [])], { stdin: sql, noSocket: true });
    // A failed statement is reported on stdout, the server's own log on stderr.
    if (res.exitCode !== 0) throw new Error(`resetting the accounts of base backup ${baseId} failed: ${backupErrorTail(`${res.stderr}\n${res.stdout}`)}`);
  } finally {
    await removeTree(tmp).catch(() => undefined);
  }
  for (const e of await withDir(work, entries)) {
    if (/^aria_log(\.\d+|_control)$/.test(e) || REPLICATION_FILES.test(e)) await removeTree(join(work, e));
  }
}
