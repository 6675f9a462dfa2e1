import { createReadStream, createWriteStream, existsSync } from 'node:fs';
import { mkdir, readdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Readable, Writable } from 'node:stream';
import type { SegmentInfo } from './chain.js';

/** What an archived binlog file is; written last, so a segment without one never happened. */
export interface SegmentManifest extends SegmentInfo {
  databaseId: number;
  /** The binlog file it was copied from and the node that wrote it. */
  sourceFile: string;
  node: number;
  /** `+zstd` since segments are written so; `+gzip` ones, written before, are still read. */
  format: 'binlog+gzip' | 'binlog+gzip+aes-256-gcm' | 'binlog+zstd' | 'binlog+zstd+aes-256-gcm';
  encryption?: { scheme: string; frameBytes: number };
  file: string;
  sizeBytes: number;
  /** Bytes of the binlog file itself (absent on older segments): what a replay has to apply. */
  rawBytes?: number;
  /** Hex SHA-256 of the stored bytes (after compression and encryption). */
  sha256: string;
}

/**
 * Where archived binlogs live: next to the database's backups
 * (`<backups>/<databaseId>/binlog/<seq>/`), so deleting a database's backups removes them too.
 * Same contract as the backup storage: `writer`, then `commit` writes the manifest last, `list`
 * skips segments without one (oldest first), `remove` is idempotent; `unfinished` names the
 * segments that have data but no manifest (a copy killed midway), for the archiver to remove.
 */
export interface SegmentStorage {
  writer(databaseId: number, seq: number, file: string): Promise<Writable>;
  commit(m: SegmentManifest): Promise<void>;
  list(databaseId: number): Promise<SegmentManifest[]>;
  reader(databaseId: number, seq: number, file: string): Readable;
  remove(databaseId: number, seq: number): Promise<void>;
  unfinished(databaseId: number): Promise<number[]>;
}

export function createLocalSegmentStorage(backupsRoot: string): SegmentStorage {
  const dir = (db: number, seq?: number) => (seq === undefined ? join(backupsRoot, String(db), 'binlog') : join(backupsRoot, String(db), 'binlog', String(seq)));
  return {
    async writer(db, seq, file) {
      await mkdir(dir(db, seq), { recursive: true, mode: 0o700 });
      return createWriteStream(join(dir(db, seq), file), { mode: 0o600 });
    },
    async commit(m) {
      const f = join(dir(m.databaseId, m.seq), 'manifest.json');
      await writeFile(`${f}.tmp`, JSON.stringify(m, null, 1), { mode: 0o600 });
      await rename(`${f}.tmp`, f);
    },
    async list(db) {
      if (!existsSync(dir(db))) return [];
      const out: SegmentManifest[] = [];
      for (const name of await readdir(dir(db))) {
        try {
          const m = JSON.parse(await readFile(join(dir(db), name, 'manifest.json'), 'utf8')) as SegmentManifest;
          if (m.seq === Number(name)) out.push(m);
        } catch {
          // No manifest: an interrupted copy, invisible by design (removed by the next archive round).
        }
      }
      return out.sort((a, b) => a.seq - b.seq);
    },
    reader(db, seq, file) {
      return createReadStream(join(dir(db, seq), file));
    },
    async remove(db, seq) {
      await rm(dir(db, seq), { recursive: true, force: true });
    },
    async unfinished(db) {
      if (!existsSync(dir(db))) return [];
      return (await readdir(dir(db))).filter((n) => /^\d+$/.test(n) && !existsSync(join(dir(db), n, 'manifest.json'))).map(Number).sort((a, b) => a - b);
    },
  };
}
