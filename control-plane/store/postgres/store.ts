import { loadOrCreateKeyFile } from '../../../lib/secret-box.js';
import type { Store } from '../store.js';
import type { Migration } from '../sqlite/migrations.js';
import { guardClient, PgExecutor } from './executor.js';
import { postgresMigrations } from './migrations.js';
import { pgAddresses, pgDataplanes, pgEvents, pgKeyValue, pgReplicaBeats, pgTokens, pgUsers } from './core-repositories.js';
import { pgNodeBalancers } from './nodebalancer-repository.js';
import { pgDatabaseRepository } from './database-repository.js';
import { pgFleet } from './fleet-repository.js';
import { pgOAuth } from './oauth-repository.js';

/** Any fixed number: the advisory lock replicas take while one of them migrates. */
const MIGRATION_LOCK = 0x46554c43;

/**
 * Opens a PostgreSQL store (`--store postgres://...`, docs/install.md): brings the schema up to
 * date, then builds every repository over one pool. Secrets are sealed with the key file, as in
 * SQLite; every replica needs the same key file (docs/security/secrets.md).
 */
export async function openPostgresStore(url: string, opts: { kekFile: string; max?: number }): Promise<Store & { executor: PgExecutor }> {
  const box = loadOrCreateKeyFile(opts.kekFile);
  const x = new PgExecutor(url, { max: opts.max });
  try {
    await migratePostgres(x);
  } catch (err) {
    await x.close();
    throw err;
  }
  return {
    kind: 'postgres',
    executor: x,
    users: pgUsers(x),
    tokens: pgTokens(x),
    events: pgEvents(x),
    addresses: pgAddresses(x),
    dataplanes: pgDataplanes(x),
    kv: pgKeyValue(x),
    nodebalancers: pgNodeBalancers(x, box),
    databases: pgDatabaseRepository(x, box),
    fleet: pgFleet(x),
    oauth: pgOAuth(x),
    replicaBeats: pgReplicaBeats(x),
    migrations: async () => (await x.rows('SELECT id FROM schema_migrations ORDER BY id')).map((r) => r.id as string),
    close: () => x.close(),
  };
}

/**
 * Applies, in id order and each in its own transaction, every migration not yet recorded. Two
 * replicas starting at once take turns on an advisory lock, so each migration runs once.
 * Returns the ids applied.
 */
export async function migratePostgres(x: PgExecutor, list: Migration[] = postgresMigrations): Promise<string[]> {
  const client = await x.pool.connect();
  // A connection lost while migrating fails the migration (and the start), not the process.
  const guard = guardClient(client);
  const applied: string[] = [];
  try {
    await client.query('SELECT pg_advisory_lock($1)', [MIGRATION_LOCK]);
    await client.query('CREATE TABLE IF NOT EXISTS schema_migrations (id TEXT PRIMARY KEY, applied_at BIGINT NOT NULL)');
    const done = new Set((await client.query('SELECT id FROM schema_migrations')).rows.map((r: { id: string }) => r.id));
    for (const m of [...list].sort((a, b) => a.id.localeCompare(b.id))) {
      if (done.has(m.id)) continue;
      await client.query('BEGIN');
      try {
        await client.query(m.sql);
        await client.query('INSERT INTO schema_migrations (id, applied_at) VALUES ($1, $2)', [m.id, Date.now()]);
        await client.query('COMMIT');
        applied.push(m.id);
      } catch (err) {
        await client.query('ROLLBACK').catch(() => undefined);
        throw new Error(`migration ${m.id} failed: ${(err as Error).message}`);
      }
    }
  } finally {
    await client.query('SELECT pg_advisory_unlock($1)', [MIGRATION_LOCK]).catch(() => undefined);
    guard.release();
  }
  return applied;
}
