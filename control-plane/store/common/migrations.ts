/**
 * The schema, for both stores: one list of migrations, written in migrations-core.ts and
 * migrations-databases.ts and migrations-oauth.ts (one file per area, so that two people appending do not collide) and
 * applied in id order, each once, by store/sqlite/database.ts and store/postgres/store.ts. Ids sort lexically and never change once
 * released, nor does what a released migration does (an upgraded install keeps its data and a
 * new one gets the same schema: test/unit/store/migrations.test.ts pins each one). Each area
 * keeps its own id range (0xx core and fleet, 1xx NodeBalancers, 2xx databases, 3xx the OAuth login) so that
 * parallel work does not collide.
 *
 * SQL is written once, in SQLite's words; PostgreSQL's is made from it by `migrationSql`:
 * INTEGER becomes BIGINT (times are milliseconds, counters grow) and REAL DOUBLE PRECISION;
 * booleans stay 0/1 integers in both, so the row mappers (rows.ts) serve both. Where the
 * dialects really differ, `sql` is a function of the dialect (docs/architecture.md, "The store",
 * says how to add a table).
 */

import type { Migration } from './dialect.js';
import { coreMigrations } from './migrations-core.js';
import { databaseMigrations } from './migrations-databases.js';
import { oauthMigrations } from './migrations-oauth.js';

export { migrationSql, type Dialect, type Migration } from './dialect.js';

/** Every migration, in the order they apply. */
export const migrations: Migration[] = [...coreMigrations, ...databaseMigrations, ...oauthMigrations].sort((a, b) => a.id.localeCompare(b.id));
