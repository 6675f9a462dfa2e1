/**
 * Repository ports: what the domain layer needs from storage, nothing about SQL.
 * The SQLite adapters in store/sqlite and the PostgreSQL adapters in store/postgres implement
 * them. Every method returns a promise, because a networked store answers later; the embedded
 * one answers at once but keeps the same contract (docs/architecture.md, "The store").
 *
 * `transaction(fn)` (on the NodeBalancer and database repositories) runs `fn` atomically over
 * every repository of the same store: whatever `fn` writes through any of them commits together
 * or not at all, and a transaction inside another one is a savepoint of it. Calls made outside
 * `fn` meanwhile wait for it or run on another connection; they never join it.
 */

import type { Grants, TokenRecord, User } from '../domain/auth/model.js';
import type { EventRecord } from '../domain/events/model.js';
import type { DataplaneStatus } from '../domain/nodebalancers/model.js';

export interface UserRepository {
  get(id: number): Promise<User | undefined>;
  byUsername(username: string): Promise<User | undefined>;
  create(u: Omit<User, 'id' | 'timezone'>): Promise<User>;
  /**
   * Reads the user's grants, applies `change` to them and writes them back, in one transaction:
   * a grant change made meanwhile by another request is kept, not overwritten with what was read
   * before it. `change` may run more than once (a retried transaction). Returns the grants
   * written, undefined when there is no such user.
   */
  changeGrants(id: number, change: (grants: Grants) => void): Promise<Grants | undefined>;
  count(): Promise<number>;
  /** All users, by id. */
  list(): Promise<User[]>;
  update(id: number, patch: Partial<Pick<User, 'username' | 'email' | 'restricted' | 'timezone'>>): Promise<void>;
  /** The user's preferences as stored (a JSON object's text); undefined when there is no such user. */
  preferences(id: number): Promise<string | undefined>;
  /** Replaces the user's preferences whole. */
  setPreferences(id: number, json: string): Promise<void>;
  /** Deletes the user and (by cascade) its tokens. */
  delete(id: number): Promise<void>;
}

export interface TokenRepository {
  byHash(hash: string): Promise<TokenRecord | undefined>;
  get(id: number): Promise<TokenRecord | undefined>;
  listByUser(userId: number): Promise<TokenRecord[]>;
  create(t: Omit<TokenRecord, 'id'> & { tokenHash: string }): Promise<TokenRecord>;
  update(id: number, patch: { label?: string }): Promise<void>;
  delete(id: number): Promise<void>;
}

/**
 * Which events a reader sees: all of them (no `entities`), or, for a restricted user, those about
 * no entity and those about the NodeBalancers and databases listed.
 */
export interface EventScope {
  entities?: { nodebalancer: readonly number[]; database: readonly number[] };
}

export interface EventRepository {
  create(e: Omit<EventRecord, 'id'>): Promise<EventRecord>;
  get(id: number): Promise<EventRecord | undefined>;
  update(id: number, patch: Partial<Pick<EventRecord, 'status' | 'percentComplete' | 'duration' | 'message' | 'seen' | 'read'>>): Promise<void>;
  /** Every event in scope, newest first (bounded by pruning: EventService). */
  list(scope?: EventScope): Promise<EventRecord[]>;
  /** At most `limit` events in scope after the newest `offset`, newest first; reads only those rows. */
  page(scope: EventScope, offset: number, limit: number): Promise<EventRecord[]>;
  /** How many events are in scope. */
  count(scope: EventScope): Promise<number>;
  /** Deletes the events created before `before` (ms), then all but the newest `keep`; returns how many went. */
  prune(before: number, keep: number): Promise<number>;
  markSeenUpTo(id: number): Promise<void>;
}

export interface AddressRepository {
  /** Allocates the lowest free address of `cidr` to the owner; undefined when the pool is full. */
  allocate(cidr: string, ownerType: string, ownerId: number): Promise<string | undefined>;
  /** The same for an IPv6 range (`fd00::/64`); released with the owner's IPv4 addresses. */
  allocateIpv6(cidr: string, ownerType: string, ownerId: number): Promise<string | undefined>;
  release(ownerType: string, ownerId: number): Promise<void>;
  owned(ownerType: string, ownerId: number): Promise<string[]>;
}

export interface DataplaneRepository {
  upsert(s: DataplaneStatus): Promise<void>;
  get(id: string): Promise<DataplaneStatus | undefined>;
  list(): Promise<DataplaneStatus[]>;
  /**
   * Marks disconnected the data planes (only `id`, when given) whose stream `replica` holds, with
   * `lastSeen` = `at` when given; a host another replica holds since is left as it is.
   */
  release(replica: string, id?: string, at?: number): Promise<void>;
}

/**
 * Heartbeats of the control-plane replicas sharing the store (docs/architecture.md, "The
 * streams"): a host reads connected only while the replica holding its stream beats.
 */
export interface ReplicaRepository {
  /**
   * Records that `id` is alive at `at`; false when the store did not know it (its first beat,
   * or a sweep took it for dead since its last one).
   */
  beat(id: string, at: number): Promise<boolean>;
  /**
   * In one transaction: marks disconnected every data plane and agent held by a replica whose
   * last beat is before `since` or that never beat (the empty id included), and forgets those
   * replicas. Returns how many hosts it marked.
   */
  sweep(since: number): Promise<number>;
}

export interface KeyValueRepository {
  get(k: string): Promise<string | undefined>;
  set(k: string, v: string): Promise<void>;
  /**
   * Runs a read-then-write of keys as one transaction, when other processes write the same
   * keys (PostgreSQL, several replicas); absent on a store with one writer (SQLite).
   */
  atomically?<T>(fn: () => Promise<T>): Promise<T>;
}
