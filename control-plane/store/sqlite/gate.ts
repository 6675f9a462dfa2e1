import { AsyncLocalStorage } from 'node:async_hooks';
import type { Database as Db } from 'better-sqlite3';

interface Tx {
  active: boolean;
  savepoints: number;
  done: Promise<void>;
}

/**
 * The one SQLite connection shared by every repository, behind the asynchronous ports.
 * better-sqlite3 runs each statement at once, so a statement can only interleave with an open
 * transaction, whose function awaits between statements. The gate keeps those apart: one
 * transaction at a time, and a call from outside it (another request) waits until it ends
 * instead of joining it. Calls from inside it (same async context) run at once; a transaction
 * inside a transaction is a savepoint.
 */
export class SqliteGate {
  private readonly context = new AsyncLocalStorage<Tx>();
  private open: Tx | undefined;
  private queue: Promise<void> = Promise.resolve();

  constructor(private readonly db: Db) {}

  /** Runs one repository call, after any transaction of another caller has ended. */
  async run<T>(fn: () => T): Promise<T> {
    const mine = this.context.getStore();
    while (this.open && this.open !== mine) await this.open.done;
    return fn();
  }

  async transaction<T>(fn: () => Promise<T>): Promise<T> {
    const outer = this.context.getStore();
    if (outer?.active && outer === this.open) return this.savepoint(outer, fn);
    let release!: () => void;
    const turn = this.queue;
    this.queue = new Promise<void>((r) => (release = r));
    await turn;
    const tx: Tx = { active: true, savepoints: 0, done: this.queue };
    this.open = tx;
    try {
      this.db.exec('BEGIN IMMEDIATE');
      const result = await this.context.run(tx, fn);
      this.db.exec('COMMIT');
      return result;
    } catch (err) {
      if (this.db.inTransaction) this.db.exec('ROLLBACK');
      throw err;
    } finally {
      tx.active = false;
      this.open = undefined;
      release();
    }
  }

  private async savepoint<T>(tx: Tx, fn: () => Promise<T>): Promise<T> {
    const name = `sp${++tx.savepoints}`;
    this.db.exec(`SAVEPOINT ${name}`);
    try {
      const result = await fn();
      this.db.exec(`RELEASE ${name}`);
      return result;
    } catch (err) {
      this.db.exec(`ROLLBACK TO ${name}`);
      this.db.exec(`RELEASE ${name}`);
      throw err;
    }
  }

  /** The asynchronous port over an immediate implementation: every method goes through the gate. */
  wrap<T extends object>(impl: Omit<Immediate<T>, 'transaction'>): T {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(impl)) {
      out[k] = typeof v === 'function' ? (...a: unknown[]) => this.run(() => (v as (...x: unknown[]) => unknown)(...a)) : v;
    }
    out.transaction = <R>(fn: () => Promise<R>) => this.transaction(fn);
    return out as T;
  }
}

const gates = new WeakMap<Db, SqliteGate>();

/** The gate of a connection (one per connection, made on first use). */
export function gateOf(db: Db): SqliteGate {
  let g = gates.get(db);
  if (!g) gates.set(db, (g = new SqliteGate(db)));
  return g;
}

/**
 * A port whose methods return plain values: how the embedded adapter writes its repositories
 * before the gate makes them the asynchronous port.
 */
export type Immediate<T> = {
  [K in keyof T]: T[K] extends (...a: infer A) => Promise<infer R> ? (...a: A) => R : T[K];
};
