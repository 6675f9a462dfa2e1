// The adapters' side of UniqueViolation (domain/ports.ts): which driver error is one.

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
