import Database from 'better-sqlite3';
import type { Database as Db } from 'better-sqlite3';
import { coreMigrations, type Migration } from './migrations.js';
import { databaseMigrations } from './migrations-databases.js';
import { fleetMigrations } from './migrations-fleet.js';

export type { Db };

/**
 * Opens (or creates) the control plane's SQLite file in WAL mode and brings its schema up to date.
 * better-sqlite3 is synchronous: callers keep transactions short and do slow work after commit.
 */
export function openDatabase(path: string): Db {
  const db = new Database(path);
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = NORMAL');
  db.pragma('foreign_keys = ON');
  db.pragma('busy_timeout = 5000');
  migrate(db, [...coreMigrations, ...fleetMigrations, ...databaseMigrations]);
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
    })();
  }
}
