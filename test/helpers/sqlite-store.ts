import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach } from 'vitest';
import { ManualClock } from '../../lib/clock.js';
import { openDatabase, type Db } from '../../control-plane/store/sqlite/database.js';
import { sqliteDatabaseRepository } from '../../control-plane/store/sqlite/database-repository.js';
import { sqliteEvents } from '../../control-plane/store/sqlite/core-repositories.js';
import { EventService } from '../../control-plane/domain/events/event-service.js';
import type { DatabaseRepository } from '../../control-plane/domain/databases/repository.js';

/** A control-plane SQLite store in a temporary folder, driven by a ManualClock. */
export interface SqliteStore {
  dir: string;
  db: Db;
  clock: ManualClock;
  repo: DatabaseRepository;
  events: EventService;
}

/**
 * For integration tests of the database domain over the real store: call inside `describe`; each
 * `open()` makes a fresh store in a folder named after `prefix`, closed and removed after the test.
 */
export function useSqliteStore(prefix: string): { open: () => SqliteStore } {
  const opened: SqliteStore[] = [];
  afterEach(() => {
    for (const s of opened.splice(0)) {
      s.db.close();
      rmSync(s.dir, { recursive: true, force: true });
    }
  });
  return {
    open() {
      const dir = mkdtempSync(join(tmpdir(), `fulcrum-${prefix}-`));
      const db = openDatabase(join(dir, 'cp.db'));
      const clock = new ManualClock();
      const store: SqliteStore = { dir, db, clock, repo: sqliteDatabaseRepository(db), events: new EventService(sqliteEvents(db), clock) };
      opened.push(store);
      return store;
    },
  };
}
