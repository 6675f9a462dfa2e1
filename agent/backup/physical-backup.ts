import { constants, createReadStream } from 'node:fs';
import { open, readdir, stat, statfs } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import { q, serverSocket, withAdmin } from '../mysql/admin.js';
import { customerSchemas } from '../mysql/customer-data.js';
import { gtidCurrentPos } from '../mysql/replication.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { ensureDir, removeTree } from '../runtime/no-follow.js';
import type { DatabaseController } from '../database/controller.js';
import { BACKUP_CIPHER, FRAME_BYTES } from './backup-crypto.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';
import { sealedWriter } from './sealed-writer.js';

/**
 * A physical base's file: zstd at level 1. Its decompression was the slowest step of a fork from
 * a base (gzip's inflate, one thread: about 6.8 CPU seconds per GB of data against zstd's 2.0
 * on this host, docs/performance.md, "The object store"), and zstd -1 also stores less. Bases
 * written with gzip before (`base.mbstream.gz[.aes]`, format `+gzip`) are still read.
 */
export const PHYSICAL_FILE = 'base.mbstream.zst';
export const PHYSICAL_ENCRYPTED_FILE = 'base.mbstream.zst.aes';
/** zstd's level for a base: its fastest regular one (the upload runs in the agent's process). */
const PHYSICAL_ZSTD_LEVEL = 1;

/**
 * How often mariadb-backup reads the server's redo log while it copies (its default is 1000 ms).
 * A 1 GB plan's server has a 32 MB redo log (agent/mysql/config-render.ts), which heavy writes
 * fill in well under a second; what the copy has not read by then is overwritten and the copy
 * fails. Polling every 50 ms costs nothing measurable.
 */
export const LOG_COPY_INTERVAL_MS = 50;

/**
 * The redo log a server holds while a physical copy of it runs (docs/agent.md §6). Its own is a
 * quarter of its buffer pool, 32 MB on a 1 GB plan, which a server under heavy writes fills in
 * well under a second; mariadb-backup must read every part of it before the server writes over
 * it, and on a busy 2-core host the tool is often off the CPU for longer than that: its copy
 * failed ("Was only able to copy log from X to Y, not Z; try increasing innodb_log_file_size",
 * with Z over 100 MB past X). MariaDB 10.11 resizes the redo log online, so the agent grows it
 * for the copy and gives it back its configured size afterwards.
 */
export const BASE_REDO_BYTES = 512 * 1024 * 1024;

/**
 * Whether a spool of about `dataBytes` fits in `freeBytes` and still leaves the server's disk a
 * margin (a tenth of the free space, at least 256 MB): the spool shares the disk with the data
 * directory, and a server that cannot write stops taking writes.
 */
export function roomToSpool(freeBytes: number, dataBytes: number): boolean {
  return freeBytes - dataBytes >= Math.max(256 * 1024 * 1024, freeBytes / 10);
}

/**
 * Resizes the server's redo log online (MariaDB 10.11 and later; the statement returns once the
 * server writes to the new log). False when the server cannot (an older server, where the
 * variable is read-only, or one that went away): the copy then runs with the log it has. A size
 * that was not given back (the agent stopped meanwhile) lasts until the server restarts with its
 * option file.
 */
async function setRedoSize(c: Pick<DatabaseController, 'adminTarget'>, node: number, bytes: number): Promise<boolean> {
  try {
    await withAdmin(await c.adminTarget(node), (x) => q(x, 'SET GLOBAL innodb_log_file_size = ?', [bytes]));
    return true;
  } catch {
    return false;
  }
}

/** A physical copy (mariadb-backup): only forks load it, never a restore in place. */
export const isPhysical = (m: Pick<BackupManifest, 'format'>): boolean => m.format.startsWith('mariadb-backup+');

/**
 * The GTID position of the copy's consistent point, from mariadb-backup's log
 * ("... GTID of the last change '0-1-42'"): it takes the position under the same lock
 * (BACKUP STAGE BLOCK_COMMIT) that ends the copy of the transactional data, so a binlog replay
 * from there applies each transaction once. The last mention wins; undefined when absent.
 */
export function physicalSnapshotGtid(stderr: string): string | undefined {
  let found: string | undefined;
  for (const m of stderr.matchAll(/GTID of the last change '([0-9,-]*)'/g)) found = m[1];
  return found;
}

/** The binlog file and offset of the same point (how much of that file the copy already holds). */
export function physicalBinlogPos(stderr: string): { file: string; pos: number } | undefined {
  let found: { file: string; pos: number } | undefined;
  for (const m of stderr.matchAll(/filename '([^']+)', position '(\d+)'/g)) found = { file: m[1]!, pos: Number(m[2]) };
  return found;
}

/** The server's run folder on the agent's host and as the server sees it (inside a container). */
export async function runFolders(runtime: ContainerRuntime, name: string, nodeSocket: string): Promise<{ host: string; node: string }> {
  return { host: dirname((await runtime.connection(name)).socketPath), node: dirname(nodeSocket) };
}

/**
 * A scratch folder in the server's run folder, empty, owned as the run folder is (by the node's
 * uid, which the tools run as). The run folder is the node's, so whatever it left under that
 * name is removed, and the folder made, without following links (no-follow.ts).
 */
export async function scratch(hostRun: string, name: string): Promise<string> {
  const dir = join(hostRun, name);
  await removeTree(dir);
  const owner = await stat(hostRun);
  await ensureDir(dir, { mode: 0o700, owner: { uid: owner.uid, gid: owner.gid } });
  return dir;
}

/**
 * The lines of mariadb-backup's log that say why it failed (its log is long and ends with the
 * shutdown of its embedded InnoDB, so the last lines alone often miss the reason), plus the last
 * line, at most about 800 characters.
 */
export function backupErrorTail(stderr: string): string {
  const lines = stderr.split('\n').map((l) => l.trim()).filter((l) => l !== '');
  const why = lines.filter((l) => /\berror\b|fatal|was only able|failed|denied|cannot|can't/i.test(l)).slice(-4);
  const last = lines.at(-1);
  const picked = last !== undefined && !why.includes(last) ? [...why, last] : why;
  return picked.join(' | ').slice(-800) || '(no output)';
}

/**
 * Takes backup `id` of database c from `node` as a physical copy (docs/agent.md §6, "Binlog
 * archive and forks"): `mariadb-backup --backup --stream=mbstream`, run where the server runs
 * (inside its container on docker) with the engine's own tool, so its version is the server's.
 * The stream goes to a spool file in the server's run folder first, uncompressed, and only once
 * the tool has finished is it compressed (zstd, fast level), encrypted when the database is `encrypted`,
 * hashed and stored, manifest last. Why the spool: the tool must copy the server's redo log
 * faster than the server overwrites it, and with a slow reader on its output (gzip on a busy
 * host, or the agent's event loop reading a pipe) it fell behind under heavy writes ("Was only
 * able to copy log ... try increasing innodb_log_file_size"), so the base failed; a local file
 * that the tool writes itself keeps up.
 */
export async function takePhysical(
  deps: { runtime: ContainerRuntime; storage: BackupStorage; backupKey: () => Promise<string>; signal?: AbortSignal; encrypt?: boolean },
  c: Pick<DatabaseController, 'id' | 'state' | 'desired' | 'nodeName' | 'adminTarget'>,
  id: number,
  node: number,
  meta: Pick<BackupManifest, 'label' | 'type' | 'createdMs'>,
): Promise<BackupManifest> {
  const s = c.state!;
  const started = Date.now();
  const name = c.nodeName(node);
  const info = await withAdmin(await c.adminTarget(node), async (x) => ({
    gtid: await gtidCurrentPos(x),
    databases: await customerSchemas(x),
    datadir: String((await q(x, 'SELECT @@datadir AS d'))[0]?.d ?? ''),
    // What the copy will hold, roughly: every table's pages, plus the system tablespace's.
    dataBytes: Number((await q(x, 'SELECT SUM(DATA_LENGTH + INDEX_LENGTH + DATA_FREE) AS n FROM information_schema.TABLES'))[0]?.n ?? 0),
    socket: await serverSocket(x),
    redoBytes: Number((await q(x, 'SELECT @@innodb_log_file_size AS n'))[0]?.n ?? 0),
  }));
  const run = await runFolders(deps.runtime, name, info.socket);
  // Cancelled (the database is being deleted): nothing more is made in its run folder.
  deps.signal?.throwIfAborted();
  // A copy an agent crash interrupted left its spool (the data directory's size) behind. A node
  // holds one copy at a time (its database's archive rounds never overlap), so any other is stale.
  for (const f of await readdir(run.host)) {
    if (/^backup-(spool-\d+\.mbstream|tmp-\d+)$/.test(f)) await removeTree(join(run.host, f));
  }
  const tmp = `backup-tmp-${id}`;
  await scratch(run.host, tmp);
  const spool = join(run.host, `backup-spool-${id}.mbstream`);
  // The spool is the agent's: the tool gets only its descriptor (as its stdout) and the agent
  // reads it back through the same descriptor, so the node's uid, which owns the folder, can
  // neither have it written through a link nor swap in another file to be read and stored.
  const { O_RDWR, O_CREAT, O_EXCL, O_NOFOLLOW } = constants;
  const spoolFile = await open(spool, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW, 0o600);
  try {
    const fs = await statfs(run.host);
    const redoGrowth = Math.max(0, BASE_REDO_BYTES - info.redoBytes);
    if (!roomToSpool(fs.bavail * fs.bsize, info.dataBytes + redoGrowth)) {
      throw new Error(`not enough free disk to spool the copy: ${Math.round((fs.bavail * fs.bsize) / 1048576)} MB free, about ${Math.round(info.dataBytes / 1048576)} MB of data`);
    }
    // Encrypted for an `encrypted` database, and for every database when the store is off the host.
    const encrypted = deps.encrypt ?? c.desired?.encrypted === true;
    // --datadir as the server reports it: the tool would otherwise read the distribution's
    // option files, whose datadir is not this server's. The spool's descriptor is the tool's
    // stdout (stdoutFd): the tool's redo-log copier writes to the same stream as its data
    // copiers, so whatever slows the reader of that stream stops the redo-log copy too. Read
    // through a pipe by the agent's event loop, which a busy 2-core host delays by tens of
    // milliseconds at a time, the copy fell behind the server's writes ("Was only able to copy
    // log ... try increasing innodb_log_file_size"); a file keeps up.
    const grown = redoGrowth > 0 && await setRedoSize(c, node, BASE_REDO_BYTES);
    const res = await deps.runtime.exec(name, ['mariadb-backup', '--backup', '--user=root', `--datadir=${info.datadir}`,
      `--target-dir=${join(run.node, tmp)}`, '--stream=mbstream', `--log-copy-interval=${LOG_COPY_INTERVAL_MS}`], { stdoutFd: spoolFile.fd, env: { MYSQL_PWD: s.adminPassword }, signal: deps.signal })
      .finally(() => (grown ? setRedoSize(c, node, info.redoBytes) : undefined));
    // A cancelled copy failed because it was stopped: its exit code says nothing more.
    deps.signal?.throwIfAborted();
    // A spool that failed (a full disk) fails the tool, which says so in its log.
    if (res.exitCode !== 0) throw new Error(`mariadb-backup failed (${res.exitCode}): ${backupErrorTail(res.stderr)}`);
    const snapshotGtid = physicalSnapshotGtid(res.stderr);
    if (snapshotGtid === undefined) throw new Error(`mariadb-backup printed no GTID position: ${backupErrorTail(res.stderr)}`);
    const file = encrypted ? PHYSICAL_ENCRYPTED_FILE : PHYSICAL_FILE;
    // The key before the store's stream, which nothing listens to until sealedWriter (dump-backup.ts).
    const key = encrypted ? await deps.backupKey() : undefined;
    const sealed = sealedWriter(await deps.storage.writer(c.id, id, file), { level: PHYSICAL_ZSTD_LEVEL, codec: 'zstd', key });
    // A stream on the bare descriptor: a FileHandle's own streams with autoClose off keep it
    // referenced, and its close() would then wait forever.
    await pipeline(createReadStream('', { fd: spoolFile.fd, start: 0, autoClose: false }), sealed.input, { signal: deps.signal });
    const { sizeBytes, sha256 } = await sealed.done;
    const manifest: BackupManifest = {
      id, databaseId: c.id, ...meta, target: node === s.primary ? 'primary' : 'secondary',
      finishedMs: meta.createdMs + (Date.now() - started), engineVersion: s.running.version, gtidPos: info.gtid, snapshotGtid,
      format: encrypted ? 'mariadb-backup+mbstream+zstd+aes-256-gcm' : 'mariadb-backup+mbstream+zstd',
      ...(encrypted ? { encryption: { scheme: BACKUP_CIPHER, frameBytes: FRAME_BYTES } } : {}),
      file, sizeBytes, sha256, databases: info.databases,
      ...(physicalBinlogPos(res.stderr) ? { binlog: physicalBinlogPos(res.stderr) } : {}),
    };
    deps.signal?.throwIfAborted();
    await deps.storage.commit(manifest);
    return manifest;
  } catch (err) {
    await deps.storage.remove(c.id, id).catch(() => undefined);
    throw err;
  } finally {
    await spoolFile.close().catch(() => undefined);
    await removeTree(join(run.host, tmp)).catch(() => undefined);
    await removeTree(spool).catch(() => undefined);
  }
}
