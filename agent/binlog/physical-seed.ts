import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import { PassThrough, type Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { createGunzip } from 'node:zlib';
import { crashPoint } from '../../lib/crash-point.js';
import { BACKUP_CIPHER, createDecryptStream } from '../backup/backup-crypto.js';
import type { BackupManifest, BackupStorage } from '../backup/backup-storage.js';
import { runFolders, scratch } from '../backup/physical-backup.js';
import type { DatabaseController } from '../database/controller.js';
import { NODE_PORT } from '../database/state.js';
import { ensureReplicationUser } from '../mysql/accounts.js';
import { globalStatus, q, withAdmin } from '../mysql/admin.js';
import { clientError } from '../mysql/customer-data.js';
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
 * fork primary's own engine, the same version as the source's, in its run folder; every node is
 * stopped, its data directory replaced by the prepared copy and started again. The copy carries
 * the source's system tables, so root gets the fork's password back (the source's admin password
 * opens it), the replication account the fork's, and every node forgets the source's GTID state
 * and replication before the replicas are attached again: the fork's binlog starts empty, as a
 * new server's does, and the replay that follows reaches the replicas through replication.
 */
export async function seedPhysical(
  d: { runtime: ContainerRuntime; storage: BackupStorage },
  fork: Fork,
  source: { id: number; backupKey?: string; adminPassword: string },
  m: BackupManifest,
): Promise<Record<string, number>> {
  // Milliseconds per step, logged with the fork's seed (docs/performance.md reads them).
  const ms: Record<string, number> = {};
  let mark = Date.now();
  const step = (name: string) => { const now = Date.now(); ms[name] = now - mark; mark = now; };
  const s = fork.state!;
  const p = s.primary;
  const ks = s.addresses.map((_, i) => i + 1);
  const pName = fork.nodeName(p);
  let decrypt: Transform | undefined;
  if (m.format === 'mariadb-backup+mbstream+gzip+aes-256-gcm') {
    if (m.encryption?.scheme !== BACKUP_CIPHER || !source.backupKey) throw new Error(`base backup ${m.id} of database ${source.id} cannot be decrypted`);
    decrypt = createDecryptStream(source.backupKey);
  } else if (m.format !== 'mariadb-backup+mbstream+gzip') throw new Error(`base backup ${m.id} is not a physical copy`);
  const { socket, semiSync } = await withAdmin(await fork.adminTarget(p), async (x) => ({
    socket: String((await q(x, 'SELECT @@socket AS s'))[0]?.s ?? ''),
    semiSync: String((await q(x, 'SELECT @@rpl_semi_sync_master_enabled AS v'))[0]?.v ?? '0') === '1',
  }));
  const run = await runFolders(d.runtime, pName, socket);
  const work = await scratch(run.host, 'fork-base');
  const nodeWork = join(run.node, 'fork-base');
  try {
    const feed = new PassThrough();
    const src = d.storage.reader(source.id, m.id, m.file);
    // 256 KiB output chunks instead of zlib's 16 KiB: a GB-sized base is cut into 16x fewer
    // pieces on its way to mbstream (1 GB: 5.4 s instead of 9.2 s, docs/performance.md).
    const gunzip = createGunzip({ chunkSize: UNPACK_CHUNK });
    const feeding = (decrypt ? pipeline(src, decrypt, gunzip, feed) : pipeline(src, gunzip, feed)).then(() => undefined, (e: Error) => e);
    const x = await d.runtime.exec(pName, ['mbstream', '-x', '-C', nodeWork], { stdin: feed, noSocket: true });
    const fed = await feeding;
    if (x.exitCode !== 0) throw new Error(`unpacking base backup ${m.id} failed: ${x.stderr.trim().split('\n').slice(-2).join(' ')}`);
    if (fed) throw new Error(`reading base backup ${m.id} failed: ${fed.message}`);
    step('unpackMs');
    const prep = await d.runtime.exec(pName, ['mariadb-backup', '--prepare', `--target-dir=${nodeWork}`]);
    if (prep.exitCode !== 0) throw new Error(`preparing base backup ${m.id} failed: ${prep.stderr.trim().split('\n').slice(-3).join(' ')}`);
    step('prepareMs');
    // `work` is the node's, written by its uid (the tools run as the node): the agent reads,
    // moves and removes in it without following links, and takes only files that uid owns
    // (no-follow.ts), so a link or a hard link to a host file cannot end up in a data dir.
    const toolUid = (await stat(run.host)).uid;
    for (const name of await withDir(work, entries)) if (BOOKKEEPING.test(name)) await removeTree(join(work, name));
    // Replicas get copies, the primary the prepared folder itself (same file system: a rename).
    for (const k of [...ks.filter((k) => k !== p), p]) {
      const name = fork.nodeName(k);
      const dataDir = (await d.runtime.inspect(name)).spec?.dataDir;
      if (!dataDir) throw new Error(`node ${name} of the fork has no data directory`);
      await d.runtime.stop(name);
      const owner = await stat(dataDir);
      for (const e of await withDir(dataDir, entries)) await removeTree(join(dataDir, e));
      if (k !== p) await copyTree(work, dataDir, toolUid);
      else await moveEntries(work, dataDir, toolUid);
      await chownTree(dataDir, { uid: owner.uid, gid: owner.gid });
    }
  } finally {
    await removeTree(work).catch(() => undefined);
  }
  step('placeMs');
  await Promise.all(ks.map((k) => d.runtime.start(fork.nodeName(k))));
  step('startMs');
  // The nodes now run the source's copy, root still with the source's password.
  crashPoint('fork-restarted');
  for (const k of ks) {
    const t = await fork.adminTarget(k);
    await adoptRoot(t.socketPath, source.adminPassword, t.password);
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

/** root@localhost of a restored copy has the source's password: give it the fork's. */
async function adoptRoot(socketPath: string, sourcePassword: string, password: string): Promise<void> {
  try {
    await withAdmin({ socketPath, password: sourcePassword }, async (x) => {
      await x.query('SET SESSION sql_log_bin=0');
      await x.query("ALTER USER 'root'@'localhost' IDENTIFIED BY ?", [password]);
    });
  } catch (err) {
    if ((err as { code?: string }).code !== 'ER_ACCESS_DENIED_ERROR') throw new Error(`the fork's restored server refused its admin: ${clientError((err as Error).message) || (err as Error).message}`);
    // Already the fork's (a retry after this step): the next connection proves it.
  }
}
