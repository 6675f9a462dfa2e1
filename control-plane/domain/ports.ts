/**
 * Repository ports: what the domain layer needs from storage, nothing about SQL. Each area keeps
 * its own beside its model (auth/, events/, nodebalancers/, databases/, fleet/ `repository.ts`);
 * the ones no single area owns are here. The SQLite adapters in store/sqlite and the PostgreSQL
 * adapters in store/postgres implement them; the domain never imports the store (lint). Every
 * method returns a promise, because a networked store answers later; the embedded one answers at
 * once but keeps the same contract (docs/architecture.md, "The store").
 *
 * `transaction(fn)` (on the NodeBalancer and database repositories) runs `fn` atomically over
 * every repository of the same store: whatever `fn` writes through any of them commits together
 * or not at all, and a transaction inside another one is a savepoint of it. Calls made outside
 * `fn` meanwhile wait for it or run on another connection; they never join it.
 */

export interface AddressRepository {
  /** Allocates the lowest free address of `cidr` to the owner; undefined when the pool is full. */
  allocate(cidr: string, ownerType: string, ownerId: number): Promise<string | undefined>;
  /** The same for an IPv6 range (`fd00::/64`); released with the owner's IPv4 addresses. */
  allocateIpv6(cidr: string, ownerType: string, ownerId: number): Promise<string | undefined>;
  release(ownerType: string, ownerId: number): Promise<void>;
  owned(ownerType: string, ownerId: number): Promise<string[]>;
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
