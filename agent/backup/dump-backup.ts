import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { accountChangesBetween, binlogEnd, type BinlogPoint } from '../mysql/account-changes.js';
import { withAdmin, q } from '../mysql/admin.js';
import { clientError, customerAccountsSql, customerSchemas } from '../mysql/customer-data.js';
import { gtidCurrentPos } from '../mysql/replication.js';
import type { DatabaseController } from '../database/controller.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';
import { BACKUP_CIPHER, FRAME_BYTES } from './backup-crypto.js';
import { databaseKey, type KeyedDatabase } from './backup-key.js';
import { sealedWriter } from './sealed-writer.js';
import { snapshotGtidTap } from './snapshot-gtid.js';
import { formatOf, STORE_ZSTD_LEVEL } from './store-codec.js';

/** What a dump uses of a database. */
type DumpedDatabase = Pick<DatabaseController, 'id' | 'state' | 'nodeName' | 'adminTarget'> & KeyedDatabase;

const DUMP_FILE = 'dump.sql.zst';
const ENCRYPTED_FILE = 'dump.sql.zst.aes';
/** Dumps taken before a backup whose reads no account or schema change came between gives up. */
export const BACKUP_ACCOUNT_TRIES = 3;

/**
 * Writes backup `id` of database c from `node` and commits its manifest: the accounts, then
 * mariadb-dump, compressed, encrypted when `encrypted`, hashed as stored, manifest last. The
 * privilege tables are not transactional, so the accounts and the schema list are read before
 * the dump's InnoDB snapshot; the node's binlog from before those reads up to the snapshot's
 * position says whether an account or schema statement came in between (account-changes.ts).
 * When one did, that attempt's file is removed uncommitted and the backup is taken again
 * (BACKUP_ACCOUNT_TRIES in all). Why this is exact: docs/agent.md §6. On any failure nothing of
 * `id` is left in the store.
 */
export async function writeDump(
  deps: { storage: BackupStorage; runtime: ContainerRuntime },
  c: DumpedDatabase, id: number, node: number, encrypted: boolean,
  meta: Pick<BackupManifest, 'label' | 'type' | 'createdMs'>, signal?: AbortSignal,
): Promise<BackupManifest> {
  const s = c.state!;
  const started = Date.now();
  const file = encrypted ? ENCRYPTED_FILE : DUMP_FILE;
  try {
    for (let attempt = 1; ; attempt++) {
      const admin = await c.adminTarget(node);
      const read = await withAdmin(admin, async (x) => {
        const from = await binlogEnd(x);
        if (!from) throw new Error(`node ${node} has no binlog: the backup cannot tell whether the accounts changed while it started`);
        // A replica's binlog has the statements it applied only with log_slave_updates (always on
        // in our config, config-render.ts); without it the check below would see none of them.
        if (node !== s.primary && Number((await q(x, 'SELECT @@log_slave_updates AS u'))[0]?.u) !== 1) {
          throw new Error(`node ${node} does not log the statements it replicates (log_slave_updates is off): the backup cannot tell whether the accounts changed while it started`);
        }
        return { from, gtid: await gtidCurrentPos(x), databases: await customerSchemas(x), accounts: await customerAccountsSql(x) };
      });
      signal?.throwIfAborted();
      const { gtid, databases } = read;
      // The key first: it may be made and saved, and a store's stream made before that wait
      // could fail (its file not opened, the object store refusing) with nothing listening.
      const key = encrypted ? await databaseKey(c) : undefined;
      const sealed = sealedWriter(await deps.storage.writer(c.id, id, file), { level: STORE_ZSTD_LEVEL, codec: 'zstd', key });
      const input = sealed.input;
      input.write(read.accounts);
      const snapshot = snapshotGtidTap();
      snapshot.tap.pipe(input);
      // A store that fails (a full disk, the object store refusing) stops the dump, whose output
      // is then let through to nowhere: the tap would otherwise fill, and the tool (and its exit)
      // wait on it for good.
      const storeFailed = new AbortController();
      sealed.done.catch((err: unknown) => {
        snapshot.tap.unpipe(input);
        snapshot.tap.resume();
        storeFailed.abort(err);
      });
      let snapshotGtid = gtid;
      let to: BinlogPoint | undefined;
      if (databases.length > 0) {
        // Schema names are the customer's: after `--` a name such as `--result-file=/path` is a
        // name, never an option (docs/security/secrets.md).
        const res = await deps.runtime.exec(
          c.nodeName(node),
          ['mariadb-dump', '--user=root', '--single-transaction', '--routines', '--triggers', '--events', '--hex-blob',
            '--master-data=2', '--gtid', '--add-drop-database', '--databases', '--', ...databases],
          { stdout: snapshot.tap, env: { MYSQL_PWD: s.adminPassword }, signal: signal ? AbortSignal.any([signal, storeFailed.signal]) : storeFailed.signal },
        );
        signal?.throwIfAborted();
        storeFailed.signal.throwIfAborted();
        if (res.exitCode !== 0) throw new Error(`mariadb-dump failed (${res.exitCode}): ${clientError(res.stderr)}`);
      } else {
        input.end();
        // Nothing dumped: what was read stands for the binlog's end once the reads were done.
        to = await withAdmin(admin, (x) => binlogEnd(x));
      }
      const { sizeBytes: size, sha256 } = await sealed.done;
      if (databases.length > 0) {
        // Read once every byte has gone through the tap: when the tool exits, its last output
        // (where the position is) can still wait in the tap's buffer behind a slower compressor.
        snapshotGtid = snapshot.gtid() ?? '';
        if (!snapshotGtid) throw new Error('mariadb-dump printed no GTID position');
        to = snapshot.point();
        if (!to) throw new Error('mariadb-dump printed no binlog position');
      }
      // Positions only: a statement's text may hold a password hash.
      const changed = await withAdmin(admin, (x) => accountChangesBetween(x, read.from, to!));
      if (changed.length > 0) {
        await deps.storage.remove(c.id, id);
        if (attempt >= BACKUP_ACCOUNT_TRIES) {
          throw new Error(`the customer's accounts or schemas changed on node ${node} between the backup's reading of them and its snapshot, ${attempt} times in a row (last at ${changed.slice(0, 3).join(', ')})`);
        }
        signal?.throwIfAborted();
        continue;
      }
      const manifest: BackupManifest = {
        id, databaseId: c.id, ...meta, target: node === s.primary ? 'primary' : 'secondary',
        finishedMs: meta.createdMs + (Date.now() - started), engineVersion: s.running.version, gtidPos: gtid, snapshotGtid,
        format: formatOf('mariadb-dump', 'zstd', encrypted),
        ...(encrypted ? { encryption: { scheme: BACKUP_CIPHER, frameBytes: FRAME_BYTES } } : {}),
        file, sizeBytes: size, sha256, databases,
      };
      signal?.throwIfAborted();
      await deps.storage.commit(manifest);
      return manifest;
    }
  } catch (err) {
    await deps.storage.remove(c.id, id).catch(() => undefined);
    throw err;
  }
}
