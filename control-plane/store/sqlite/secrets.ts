import { SecretBox } from '../../../lib/secret-box.js';
import type { Database as Db } from 'better-sqlite3';

/**
 * The columns that hold secrets (docs/security/secrets.md): sealed on write and opened on read by
 * the repositories, so domain code only ever sees plain values. The context bound to each sealed
 * value is `<table>.<column>`.
 */
export const secretColumns = [
  { table: 'databases', column: 'root_password' },
  { table: 'databases', column: 'next_password' },
  // A spread cluster's CA key and replication password (JSON, sealed whole).
  { table: 'databases', column: 'cluster_secrets' },
  // The backup key its agent reported, handed to the agent of a fork from a shared store.
  { table: 'databases', column: 'backup_key' },
  // Operation payloads carry a pending reset password (resetCredentials); all are sealed alike.
  { table: 'database_operations', column: 'payload' },
  { table: 'nb_configs', column: 'ssl_key' },
] as const;

const boxes = new WeakMap<Db, SecretBox>();

export function attachSecretBox(db: Db, box: SecretBox): void {
  boxes.set(db, box);
}

/**
 * Runs `fn`, which seals values and writes them, in an immediate transaction (a savepoint inside
 * one already open): the seal happens once the write lock is held. Sealed first and written after
 * a wait for the lock, a value could carry a key that `fulcrum kek rotate` dropped meanwhile (it
 * re-seals, checks and drops the old key while this process waits), and would never open again.
 * Under the lock, the seal either comes before the rotation's re-seal, which then re-seals it, or
 * after the rotation added its key, which the seal then uses (docs/security/secrets.md).
 */
export function sealUnderLock<T>(db: Db, fn: () => T): T {
  return db.transaction(fn).immediate();
}

/** The secret box of a store opened by openDatabase. */
export function secretsOf(db: Db): SecretBox {
  const box = boxes.get(db);
  if (!box) throw new Error('this database was opened without a key-encryption key');
  return box;
}

/**
 * Seals every secret value that is not sealed under the active key: plain values left by a
 * version before encryption (the first start after an upgrade) or, during `fulcrum kek rotate`,
 * values under an older key. Runs in one transaction; returns how many values changed.
 * The transaction is immediate (write lock first, then read): beside a running control plane a
 * deferred one that has read cannot wait for the control plane's write, and fails at once with
 * `database is locked` (docs/security/secrets.md, "Rotation").
 */
export function resealSecrets(db: Db, box: SecretBox): number {
  // Nothing to do on most opens: take no write lock then (another connection, in this process
  // or another, may be writing).
  if (unsealedCount(db, box) === 0) return 0;
  let changed = 0;
  db.transaction(() => {
    for (const { table, column } of secretColumns) {
      const context = `${table}.${column}`;
      const rows = db.prepare(`SELECT rowid AS r, "${column}" AS v FROM ${table} WHERE "${column}" IS NOT NULL`).all() as { r: number; v: string }[];
      const update = db.prepare(`UPDATE ${table} SET "${column}" = ? WHERE rowid = ?`);
      for (const { r, v } of rows) {
        if (SecretBox.keyIdOf(v) === box.activeId) continue;
        update.run(box.seal(box.open(v, context), context), r);
        changed++;
      }
    }
  }).immediate();
  return changed;
}

/** How many secret values are still plain or sealed under a key other than the active one. */
export function unsealedCount(db: Db, box: SecretBox): number {
  let n = 0;
  for (const { table, column } of secretColumns) {
    const values = db.prepare(`SELECT "${column}" FROM ${table} WHERE "${column}" IS NOT NULL`).pluck().all() as string[];
    n += values.filter((v) => SecretBox.keyIdOf(v) !== box.activeId).length;
  }
  return n;
}

/**
 * After values were re-sealed, the old bytes can still sit in the WAL and in free pages:
 * checkpoint the WAL into the main file, truncate it, and rebuild the file (secure_delete is on,
 * so freed pages are zeroed too).
 */
export function scrubFreedPages(db: Db): void {
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.exec('VACUUM');
  db.pragma('wal_checkpoint(TRUNCATE)');
}
