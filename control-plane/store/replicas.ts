/**
 * What control-plane replicas share besides the store (docs/architecture.md, "The store"): word
 * of each other's committed writes, so every replica's push servers send the change, and a lease
 * for the background work that must run on one replica at a time.
 */

/** What a committed write touched: one NodeBalancer, the databases, or anything at all. */
export type ChangeKind = 'nodebalancer' | 'database' | 'all';

export interface Change {
  kind: ChangeKind;
  /** The NodeBalancer's id for `nodebalancer`; 0 otherwise. */
  id: number;
}

export interface Replicas {
  /**
   * This replica's id, recorded with each host stream it holds: new for every process on
   * PostgreSQL, '' on SQLite (one process).
   */
  readonly id: string;
  /** Tells the other replicas of a committed write (this replica has already acted on it). */
  publish(kind: ChangeKind, id?: number): void;
  /** Hears of writes the other replicas committed. */
  onChange(fn: (c: Change) => void): void;
  /**
   * Hears that the other replicas took this one for dead (no heartbeat for a while) and marked
   * its hosts disconnected although it is alive: the streams it holds are to be recorded again.
   */
  onRevived(fn: () => void): void;
  /** Whether this replica holds the lease for once-only background work, now. */
  leaseHeld(): boolean;
  close(): Promise<void>;
}

/** One process on one store (SQLite): nobody to tell, and the lease is always ours. */
export function singleReplica(): Replicas {
  return {
    id: '',
    publish: () => undefined,
    onChange: () => undefined,
    onRevived: () => undefined,
    leaseHeld: () => true,
    close: async () => undefined,
  };
}

/** Parses a notification's payload `<kind>:<id>`; anything else is ignored (undefined). */
export function parseChange(payload: string | undefined): Change | undefined {
  const m = /^(nodebalancer|database|all):(\d{1,15})$/.exec(payload ?? '');
  return m ? { kind: m[1] as ChangeKind, id: Number(m[2]) } : undefined;
}
