/**
 * A write the store refused because a unique constraint already holds the value (a username
 * taken by another writer, possibly another replica, between the caller's check and its
 * insert). The store names the field; the domain words the 400 (docs/architecture.md, "The
 * store"). Only constraints a caller can answer for are reported this way.
 */
export class UniqueViolation extends Error {
  constructor(readonly field: string, options?: { cause?: unknown }) {
    super(`${field} is already taken`, options);
    this.name = 'UniqueViolation';
  }
}

/** PostgreSQL's unique_violation on the named constraint. */
export function isPgUniqueViolation(err: unknown, constraint: string): boolean {
  const e = err as { code?: string; constraint?: string };
  return e?.code === '23505' && e.constraint === constraint;
}

/** SQLite's unique-constraint failure on `table.column`. */
export function isSqliteUniqueViolation(err: unknown, column: string): boolean {
  const e = err as { code?: string; message?: string };
  return e?.code === 'SQLITE_CONSTRAINT_UNIQUE' && (e.message ?? '').includes(column);
}
