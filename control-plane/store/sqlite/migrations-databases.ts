import type { Migration } from './migrations.js';

/** Managed database schema (ids 2xx). Owned by the databases domain. */
export const databaseMigrations: Migration[] = [];
