import type { Store } from '../store.js';
import { openDatabase, type Db } from './database.js';
import { sqliteAddresses, sqliteDataplanes, sqliteEvents, sqliteKeyValue, sqliteReplicaBeats, sqliteTokens, sqliteUsers } from './core-repositories.js';
import { sqliteNodeBalancers } from './nodebalancer-repository.js';
import { sqliteDatabaseRepository } from './database-repository.js';
import { sqliteFleet } from './fleet-repository.js';
import { sqliteOAuth } from './oauth-repository.js';

/** Every repository over one SQLite connection (the embedded default store). */
export function sqliteStore(db: Db): Store & { db: Db } {
  return {
    kind: 'sqlite',
    db,
    users: sqliteUsers(db),
    tokens: sqliteTokens(db),
    events: sqliteEvents(db),
    addresses: sqliteAddresses(db),
    dataplanes: sqliteDataplanes(db),
    kv: sqliteKeyValue(db),
    nodebalancers: sqliteNodeBalancers(db),
    databases: sqliteDatabaseRepository(db),
    fleet: sqliteFleet(db),
    oauth: sqliteOAuth(db),
    replicaBeats: sqliteReplicaBeats(db),
    async migrations() {
      return db.prepare('SELECT id FROM schema_migrations ORDER BY id').pluck().all() as string[];
    },
    async close() {
      db.close();
    },
  };
}

/** Opens (or creates) the SQLite file and its key file (database.ts) as a store. */
export function openSqliteStore(path: string, opts: { kekFile?: string } = {}): Store & { db: Db } {
  return sqliteStore(openDatabase(path, opts));
}
