import Database from 'better-sqlite3';
import type { Database as Db } from 'better-sqlite3';
import { chmodSync, existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { loadOrCreateKeyFile, newKey, parseKeyFile, writeKeyFile } from '../../../lib/secret-box.js';
import { coreMigrations, type Migration } from './migrations.js';
import { databaseMigrations } from './migrations-databases.js';
import { fleetMigrations } from './migrations-fleet.js';
import { oauthMigrations } from './migrations-oauth.js';
import { attachSecretBox, resealSecrets, scrubFreedPages, unsealedCount } from './secrets.js';

export type { Db };

/** The default key file: `<folder of the database>/keys/kek` (docs/security/secrets.md). */
export function defaultKekFile(path: string): string {
  return join(dirname(path), 'keys', 'kek');
}

/**
 * Opens (or creates) the control plane's SQLite file in WAL mode and brings its schema up to date.
 * better-sqlite3 is synchronous: callers keep transactions short and do slow work after commit.
 * Secret columns are sealed with the key-encryption key in `kekFile` (created on first start);
 * plain values left by an earlier version are sealed here, on every open, and their old bytes
 * scrubbed from the file.
 */
export function openDatabase(path: string, opts: { kekFile?: string } = {}): Db {
  const box = loadOrCreateKeyFile(opts.kekFile ?? defaultKekFile(path));
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  // Deleted and overwritten content is zeroed, so an old secret does not linger in free pages.
  db.pragma('secure_delete = ON');
  for (const f of [path, `${path}-wal`, `${path}-shm`]) if (existsSync(f)) chmodSync(f, 0o600);
  migrate(db, [...coreMigrations, ...fleetMigrations, ...databaseMigrations, ...oauthMigrations]);
  attachSecretBox(db, box);
  if (resealSecrets(db, box) > 0) scrubFreedPages(db);
  return db;
}

/** Applies, in id order and each in its own transaction, every migration not yet recorded. */
function migrate(db: Db, list: Migration[]): void {
  db.exec('CREATE TABLE IF NOT EXISTS schema_migrations (id TEXT PRIMARY KEY, applied_at INTEGER NOT NULL)');
  const done = new Set(db.prepare('SELECT id FROM schema_migrations').pluck().all() as string[]);
  const sorted = [...list].sort((a, b) => a.id.localeCompare(b.id));
  for (const m of sorted) {
    if (done.has(m.id)) continue;
    db.transaction(() => {
      db.exec(m.sql);
      db.prepare('INSERT INTO schema_migrations (id, applied_at) VALUES (?, ?)').run(m.id, Date.now());
    }).immediate();
  }
}

/**
 * `fulcrum kek rotate`: adds a new key-encryption key to the key file (the old ones stay, so
 * every value still opens, also for a control plane running meanwhile, which re-reads the file),
 * re-seals every secret under it, scrubs the old bytes from the file, and only then drops the old
 * keys. Interrupted, it leaves a key file that still opens everything; the next open or rotate
 * finishes the work. Returns the new key id and how many values were re-sealed.
 */
export function rotateKek(path: string, opts: { kekFile?: string } = {}): { keyId: string; resealed: number } {
  const file = opts.kekFile ?? defaultKekFile(path);
  if (!existsSync(path)) throw new Error(`no control-plane store at ${path}`);
  if (!existsSync(file)) throw new Error(`no key file at ${file}`);
  const old = parseKeyFile(readFileSync(file, 'utf8'), file);
  const next = newKey();
  writeKeyFile(file, [...old, next]);
  const db = new Database(path);
  let resealed = 0;
  try {
    db.pragma('busy_timeout = 5000');
    db.pragma('secure_delete = ON');
    const box = loadOrCreateKeyFile(file);
    resealed = resealSecrets(db, box);
    scrubFreedPages(db);
    // A control plane that sealed a value with the old key just before it saw the new file.
    for (let i = 0; i < 5 && unsealedCount(db, box) > 0; i++) resealed += resealSecrets(db, box);
    if (unsealedCount(db, box) > 0) throw new Error('some secrets are still sealed with an old key; the key file keeps every key, run the rotation again');
  } finally {
    db.close();
  }
  writeKeyFile(file, [next]);
  return { keyId: next.id, resealed };
}
