/**
 * What control-plane replicas share besides the store (docs/architecture.md, "The store"): word
 * of each other's committed writes, so every replica's push servers send the change, and a lease
 * for the background work that must run on one replica at a time.
 */

/**
 * What a committed write touched: one NodeBalancer, the databases, or anything at all; or a
 * data plane or agent an admin removed (`removed`, with `host`).
 */
export type ChangeKind = 'nodebalancer' | 'database' | 'all' | 'removed';

export interface Change {
  kind: ChangeKind;
  /** The NodeBalancer's id for `nodebalancer`; 0 otherwise. */
  id: number;
  /** The removed host, for `removed`. */
  host?: { role: 'dataplane' | 'agent'; id: string };
}

export interface Replicas {
  /**
   * This replica's id, recorded with each host stream it holds: new for every process on
   * PostgreSQL, '' on SQLite (one process).
   */
  readonly id: string;
  /** Tells the other replicas of a committed write (this replica has already acted on it). */
  publish(kind: Exclude<ChangeKind, 'removed'>, id?: number): void;
  /**
   * Tells the other replicas that a host was removed, so that they close its streams. Best
   * effort: a replica that misses it finds the host removed at its next re-check of its open
   * streams (docs/security/grpc.md, "Revocation").
   */
  publishRemoval(role: 'dataplane' | 'agent', id: string): void;
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
    publishRemoval: () => undefined,
    onChange: () => undefined,
    onRevived: () => undefined,
    leaseHeld: () => true,
    close: async () => undefined,
  };
}

/** Parses a notification's payload `<kind>:<id>` or `removed:<role>:<host id>`; anything else is ignored (undefined). */
export function parseChange(payload: string | undefined): Change | undefined {
  const removed = /^removed:(dataplane|agent):([A-Za-z0-9][A-Za-z0-9._-]{0,63})$/.exec(payload ?? '');
  if (removed) return { kind: 'removed', id: 0, host: { role: removed[1] as 'dataplane' | 'agent', id: removed[2]! } };
  const m = /^(nodebalancer|database|all):(\d{1,15})$/.exec(payload ?? '');
  return m ? { kind: m[1] as ChangeKind, id: Number(m[2]) } : undefined;
}

/** The payload that tells the other replicas a host was removed. */
export function removalPayload(role: 'dataplane' | 'agent', id: string): string {
  return `removed:${role}:${id}`;
}
