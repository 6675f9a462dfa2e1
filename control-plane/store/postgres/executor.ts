import { AsyncLocalStorage } from 'node:async_hooks';
import pg from 'pg';
import { FulcrumError } from '../../../lib/errors.js';

interface Tx {
  client: pg.PoolClient;
  active: boolean;
  savepoints: number;
}

/**
 * Listens for 'error' on a client taken from the pool for as long as it is checked out. pg-pool
 * removes its own idle listener on checkout, and pg's Client emits 'error' when its socket resets
 * or its backend is terminated, even with no query running (idle in a transaction): without a
 * listener that is an uncaught exception and the whole control plane exits. The error also fails
 * the pending query, or the next one ("not queryable"); `release` hands the client back with the
 * error, so the pool discards it instead of lending a dead session again.
 */
export function guardClient(client: pg.PoolClient): { lost: () => Error | undefined; release: (err?: Error) => void } {
  let lost: Error | undefined;
  const onError = (err: Error) => {
    lost ??= err;
  };
  client.on('error', onError);
  let released = false;
  return {
    lost: () => lost,
    release(err?: Error) {
      if (released) return;
      released = true;
      // The pool puts its own idle listener back on release (and discards a client released
      // with an error), so a late 'error' still finds a listener.
      client.removeListener('error', onError);
      client.release(lost ?? err);
    },
  };
}

/** What a transaction whose session was lost fails with: the cause is pg's own error. */
function connectionLost(cause: Error, committing: boolean): FulcrumError {
  return new FulcrumError('internal', committing
    ? 'the PostgreSQL connection was lost while committing; the transaction may or may not have been committed'
    : 'the PostgreSQL connection was lost during the transaction; nothing of it was committed', { cause });
}

/** PostgreSQL error codes a transaction is run again for (docs/architecture.md, "The store"). */
const RETRY_CODES = new Set([
  '40001', // serialization_failure: another writer's commit changed what this one read
  '40P01', // deadlock_detected
  '23505', // unique_violation: a concurrent writer took the label, port or address first
]);
/** Tries before the refusal reaches the caller; the wait between them (real time: it waits on the server) grows, jittered, to 250 ms. */
const ATTEMPTS = 30;

// BIGINT and COUNT(*) arrive as strings by default; every integer we store (ids, ms times,
// counters) is far below 2^53, so numbers are exact. Set per pool, not globally.
const typeParsers: pg.CustomTypesConfig = {
  getTypeParser: ((oid: number, format?: 'text' | 'binary') => {
    if (oid === pg.types.builtins.INT8 || oid === pg.types.builtins.NUMERIC) return (v: string) => Number(v);
    return format === 'binary' ? pg.types.getTypeParser(oid, 'binary') : pg.types.getTypeParser(oid, 'text');
  }) as pg.CustomTypesConfig['getTypeParser'],
};

/** A row whose shape the caller has not named (common/rows.ts names the tables'). */
export type Row = Record<string, unknown>;

/**
 * The pool behind every PostgreSQL repository. A transaction holds one client for its whole
 * function; calls made inside it (same async context, found through AsyncLocalStorage) use that
 * client, calls from elsewhere take another from the pool. Transactions are SERIALIZABLE: two
 * replicas writing at once behave as if one had written first, and the one PostgreSQL refuses
 * is run again from the start, when it sees what the first committed (a label now taken is then
 * the same 400 a single writer gives). A transaction inside a transaction is a savepoint.
 */
export class PgExecutor {
  readonly pool: pg.Pool;
  private readonly context = new AsyncLocalStorage<Tx>();

  constructor(url: string, opts: { max?: number } = {}) {
    this.pool = new pg.Pool({ connectionString: url, max: opts.max ?? 10, types: typeParsers });
    // An idle client whose server went away must not crash the process; the next query reconnects.
    this.pool.on('error', () => undefined);
  }

  /** Runs one statement; `R` names the shape of its rows (common/rows.ts). */
  async query<R extends object = Row>(sql: string, params: unknown[] = []): Promise<pg.QueryResult<R>> {
    const tx = this.context.getStore();
    return tx?.active ? tx.client.query<R>(sql, params) : this.pool.query<R>(sql, params);
  }

  async rows<R extends object = Row>(sql: string, params: unknown[] = []): Promise<R[]> {
    return (await this.query<R>(sql, params)).rows;
  }

  async one<R extends object = Row>(sql: string, params: unknown[] = []): Promise<R | undefined> {
    return (await this.query<R>(sql, params)).rows[0];
  }

  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    const outer = this.context.getStore();
    if (outer?.active) return this.savepoint(outer, fn);
    for (let attempt = 1; ; attempt++) {
      const client = await this.pool.connect();
      const guard = guardClient(client);
      const tx: Tx = { client, active: true, savepoints: 0 };
      let broken: Error | undefined;
      let committing = false;
      try {
        await client.query('BEGIN ISOLATION LEVEL SERIALIZABLE');
        const result = await this.context.run(tx, fn);
        // Lost while fn waited on something else: COMMIT would fail unsent, nothing was committed.
        const lostBefore = guard.lost();
        if (lostBefore) throw connectionLost(lostBefore, false);
        committing = true;
        await client.query('COMMIT');
        return result;
      } catch (err) {
        // A FATAL error from the server (terminated backend, shutdown) ends the session: the
        // query sees it before the socket closes and pg emits 'error'.
        const lost = guard.lost() ?? ((err as { severity?: string }).severity === 'FATAL' ? err as Error : undefined);
        if (lost) {
          broken = lost;
          throw connectionLost(lost, committing);
        }
        await client.query('ROLLBACK').catch((e: Error) => (broken = e));
        if (attempt < ATTEMPTS && RETRY_CODES.has((err as { code?: string }).code ?? '')) {
          tx.active = false;
          guard.release(broken);
          await new Promise((r) => setTimeout(r, Math.random() * Math.min(250, 4 * 2 ** attempt)));
          continue;
        }
        throw err;
      } finally {
        if (tx.active) {
          tx.active = false;
          guard.release(broken);
        }
      }
    }
  }

  private async savepoint<T>(tx: Tx, fn: () => Promise<T>): Promise<T> {
    const name = `sp${++tx.savepoints}`;
    await tx.client.query(`SAVEPOINT ${name}`);
    try {
      const result = await fn();
      await tx.client.query(`RELEASE SAVEPOINT ${name}`);
      return result;
    } catch (err) {
      await tx.client.query(`ROLLBACK TO SAVEPOINT ${name}`).catch(() => undefined);
      throw err;
    }
  }

  close(): Promise<void> {
    return this.pool.end();
  }
}

/** Turns `?` placeholders into PostgreSQL's `$1, $2, ...` (no `?` appears in our SQL otherwise). */
export function pgSql(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}
