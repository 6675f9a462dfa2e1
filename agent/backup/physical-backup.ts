import { createHash } from 'node:crypto';
import { chown, mkdir, rm, stat } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGzip } from 'node:zlib';
import { q, withAdmin } from '../mysql/admin.js';
import { customerSchemas } from '../mysql/customer-data.js';
import { gtidCurrentPos } from '../mysql/replication.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import type { DatabaseController } from '../database/controller.js';
import { BACKUP_CIPHER, createEncryptStream, FRAME_BYTES } from './backup-crypto.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';

export const PHYSICAL_FILE = 'base.mbstream.gz';
export const PHYSICAL_ENCRYPTED_FILE = 'base.mbstream.gz.aes';

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

/** A scratch folder in the server's run folder, empty, owned as the run folder is. */
export async function scratch(hostRun: string, name: string): Promise<string> {
  const dir = join(hostRun, name);
  await rm(dir, { recursive: true, force: true });
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const owner = await stat(hostRun);
  await chown(dir, owner.uid, owner.gid);
  return dir;
}

/**
 * Takes backup `id` of database c from `node` as a physical copy (docs/agent.md §6, "Binlog
 * archive and forks"): `mariadb-backup --backup --stream=mbstream`, run where the server runs
 * (inside its container on docker) with the engine's own tool, so its version is the server's;
 * gzip'd (fast level: the data files are large and the copy should not fall behind the server's
 * redo log), encrypted when the database is `encrypted`, hashed as stored, manifest last.
 */
export async function takePhysical(
  deps: { runtime: ContainerRuntime; storage: BackupStorage; backupKey: () => Promise<string> },
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
    socket: String((await q(x, 'SELECT @@socket AS s'))[0]?.s ?? ''),
  }));
  const run = await runFolders(deps.runtime, name, info.socket);
  const tmp = `backup-tmp-${id}`;
  await scratch(run.host, tmp);
  try {
    const encrypted = c.desired?.encrypted === true;
    const hash = createHash('sha256');
    let size = 0;
    const tap = new Transform({
      transform(chunk: Buffer, _enc, cb) {
        hash.update(chunk);
        size += chunk.length;
        cb(null, chunk);
      },
    });
    const gzip = createGzip({ level: 1 });
    const file = encrypted ? PHYSICAL_ENCRYPTED_FILE : PHYSICAL_FILE;
    const out = await deps.storage.writer(c.id, id, file);
    const written = (encrypted ? pipeline(gzip, createEncryptStream(await deps.backupKey()), tap, out) : pipeline(gzip, tap, out))
      .then(() => undefined, (err: Error) => err);
    // --datadir as the server reports it: the tool would otherwise read the distribution's
    // option files, whose datadir is not this server's.
    const res = await deps.runtime.exec(name, ['mariadb-backup', '--backup', '--user=root', `--datadir=${info.datadir}`,
      `--target-dir=${join(run.node, tmp)}`, '--stream=mbstream'], { stdout: gzip, env: { MYSQL_PWD: s.adminPassword } });
    const w = await written;
    // Its log is long; the reason is in the last lines.
    if (res.exitCode !== 0) throw new Error(`mariadb-backup failed (${res.exitCode}): ${res.stderr.trim().split('\n').slice(-4).join(' ').slice(-600)}`);
    if (w) throw w;
    const snapshotGtid = physicalSnapshotGtid(res.stderr);
    if (snapshotGtid === undefined) throw new Error('mariadb-backup printed no GTID position');
    const manifest: BackupManifest = {
      id, databaseId: c.id, ...meta, target: node === s.primary ? 'primary' : 'secondary',
      finishedMs: meta.createdMs + (Date.now() - started), engineVersion: s.running.version, gtidPos: info.gtid, snapshotGtid,
      format: encrypted ? 'mariadb-backup+mbstream+gzip+aes-256-gcm' : 'mariadb-backup+mbstream+gzip',
      ...(encrypted ? { encryption: { scheme: BACKUP_CIPHER, frameBytes: FRAME_BYTES } } : {}),
      file, sizeBytes: size, sha256: hash.digest('hex'), databases: info.databases,
      ...(physicalBinlogPos(res.stderr) ? { binlog: physicalBinlogPos(res.stderr) } : {}),
    };
    await deps.storage.commit(manifest);
    return manifest;
  } catch (err) {
    await deps.storage.remove(c.id, id).catch(() => undefined);
    throw err;
  } finally {
    await rm(join(run.host, tmp), { recursive: true, force: true }).catch(() => undefined);
  }
}
