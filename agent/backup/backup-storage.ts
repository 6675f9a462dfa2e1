import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';

/** What a finished backup is; written last, so a backup without one never happened. */
export interface BackupManifest {
  id: number;
  databaseId: number;
  label: string;
  /**
   * `pre-restore`: the safety copy a restore takes first; `base`: the backup a binlog chain
   * starts from when no customer backup can be (agent/binlog). Neither is listed to the customer.
   */
  type: 'auto' | 'snapshot' | 'pre-restore' | 'base';
  /** Node role the dump was taken from. */
  target: 'primary' | 'secondary';
  createdMs: number;
  finishedMs: number;
  engineVersion: string;
  /** GTID position of the source when the dump started. */
  gtidPos: string;
  /**
   * The GTID position of the dump's consistent snapshot (what mariadb-dump prints for
   * `--master-data --gtid`): binlog replay for a fork starts after it. Absent on older backups.
   */
  snapshotGtid?: string;
  /** Physical copies: the binlog file and offset of their snapshot, on the node copied. */
  binlog?: { file: string; pos: number };
  /**
   * How `file` was made; `+aes-256-gcm` files need the database's backup key to read.
   * `mariadb-backup+...` is a physical copy (an mbstream of the data directory), which only a
   * fork loads (agent/binlog); every other backup is a logical dump. Both are written with zstd
   * (`+zstd`); those with gzip (`+gzip`), written before, are still read.
   */
  format: 'mariadb-dump+gzip' | 'mariadb-dump+gzip+aes-256-gcm' | 'mariadb-dump+zstd' | 'mariadb-dump+zstd+aes-256-gcm'
    | 'mariadb-backup+mbstream+gzip' | 'mariadb-backup+mbstream+gzip+aes-256-gcm'
    | 'mariadb-backup+mbstream+zstd' | 'mariadb-backup+mbstream+zstd+aes-256-gcm';
  /** Set for encrypted files: the framing scheme and the frame size it was written with (backup-crypto.ts). */
  encryption?: { scheme: string; frameBytes: number };
  file: string;
  sizeBytes: number;
  /** Hex SHA-256 of the stored bytes (after compression and encryption). */
  sha256: string;
  databases: string[];
  /**
   * In a store off the host: `label` and `databases` encrypted under the database's backup key
   * (sealed-manifest.ts), those two fields then empty in clear. Absent on manifests written
   * before sealing and in local folders.
   */
  sealed?: string;
}

/**
 * Where backups live. The agent's default keeps them under its state folder
 * (`<stateDir>/backups/<databaseId>/<backupId>/`); an object store (S3-compatible) can implement
 * the same port. Contract: `writer` returns a stream for a data file of a backup that does not
 * exist yet; `commit` writes the manifest (last: only backups with a manifest are listed);
 * `list` returns manifests, oldest first, skipping unreadable ones; `reader` opens a data file;
 * `remove` deletes a backup and everything written for it, idempotently; `withdraw` deletes only
 * its manifest, idempotently (from then on it is listed nowhere, as if removed, while a reader that
 * already holds its manifest still reads its data; `remove` takes the rest later); `unfinished`
 * names the backups that have data but no manifest (begun and never committed, or withdrawn).
 */
export interface BackupStorage {
  writer(databaseId: number, backupId: number, file: string): Promise<Writable>;
  commit(manifest: BackupManifest): Promise<void>;
  list(databaseId: number): Promise<BackupManifest[]>;
  reader(databaseId: number, backupId: number, file: string): Readable;
  size(databaseId: number, backupId: number, file: string): Promise<number>;
  remove(databaseId: number, backupId: number): Promise<void>;
  withdraw(databaseId: number, backupId: number): Promise<void>;
  unfinished(databaseId: number): Promise<number[]>;
  removeAll(databaseId: number): Promise<void>;
}

export function createLocalBackupStorage(root: string): BackupStorage {
  const dir = (db: number, id?: number) => (id === undefined ? join(root, String(db)) : join(root, String(db), String(id)));
  return {
    async writer(db, id, file) {
      await mkdir(dir(db, id), { recursive: true, mode: 0o700 });
      return createWriteStream(join(dir(db, id), file), { mode: 0o600 });
    },
    async commit(m) {
      const f = join(dir(m.databaseId, m.id), 'manifest.json');
      await writeFile(`${f}.tmp`, JSON.stringify(m, null, 1), { mode: 0o600 });
      await rename(`${f}.tmp`, f);
    },
    async list(db) {
      if (!existsSync(dir(db))) return [];
      const out: BackupManifest[] = [];
      for (const name of await readdir(dir(db))) {
        try {
          const m = JSON.parse(await readFile(join(dir(db), name, 'manifest.json'), 'utf8')) as BackupManifest;
          if (m.id === Number(name)) out.push(m);
        } catch {
          // No manifest: an interrupted backup, invisible by design.
        }
      }
      return out.sort((a, b) => a.createdMs - b.createdMs || a.id - b.id);
    },
    reader(db, id, file) {
      return createReadStream(join(dir(db, id), file));
    },
    async size(db, id, file) {
      return (await stat(join(dir(db, id), file))).size;
    },
    async remove(db, id) {
      await rm(dir(db, id), { recursive: true, force: true });
    },
    async withdraw(db, id) {
      await rm(join(dir(db, id), 'manifest.json'), { force: true });
    },
    async unfinished(db) {
      if (!existsSync(dir(db))) return [];
      const out: number[] = [];
      for (const name of await readdir(dir(db))) {
        if (/^\d+$/.test(name) && !existsSync(join(dir(db), name, 'manifest.json'))) out.push(Number(name));
      }
      return out;
    },
    async removeAll(db) {
      await rm(dir(db), { recursive: true, force: true });
    },
  };
}
