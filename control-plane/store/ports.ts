/**
 * Repository ports: what the domain layer needs from storage, nothing about SQL.
 * The SQLite adapters in store/sqlite implement them; an external SQL adapter can too.
 * All methods are synchronous because the embedded adapter is; an asynchronous adapter
 * would wrap the domain services, not change them.
 */

import type { Grants, TokenRecord, User } from '../domain/auth/model.js';
import type { EventRecord } from '../domain/events/model.js';
import type { DataplaneStatus } from '../domain/nodebalancers/model.js';

export interface UserRepository {
  get(id: number): User | undefined;
  byUsername(username: string): User | undefined;
  create(u: Omit<User, 'id'>): User;
  setGrants(id: number, grants: Grants): void;
  count(): number;
  /** All users, by id. */
  list(): User[];
  update(id: number, patch: Partial<Pick<User, 'username' | 'email' | 'restricted'>>): void;
  /** Deletes the user and (by cascade) its tokens. */
  delete(id: number): void;
}

export interface TokenRepository {
  byHash(hash: string): TokenRecord | undefined;
  get(id: number): TokenRecord | undefined;
  listByUser(userId: number): TokenRecord[];
  create(t: Omit<TokenRecord, 'id'> & { tokenHash: string }): TokenRecord;
  update(id: number, patch: { label?: string }): void;
  delete(id: number): void;
}

export interface EventRepository {
  create(e: Omit<EventRecord, 'id'>): EventRecord;
  get(id: number): EventRecord | undefined;
  update(id: number, patch: Partial<Pick<EventRecord, 'status' | 'percentComplete' | 'duration' | 'message' | 'seen' | 'read'>>): void;
  /** Newest first. */
  list(): EventRecord[];
  markSeenUpTo(id: number): void;
}

export interface AddressRepository {
  /** Allocates the lowest free address of `cidr` to the owner; undefined when the pool is full. */
  allocate(cidr: string, ownerType: string, ownerId: number): string | undefined;
  /** The same for an IPv6 range (`fd00::/64`); released with the owner's IPv4 addresses. */
  allocateIpv6(cidr: string, ownerType: string, ownerId: number): string | undefined;
  release(ownerType: string, ownerId: number): void;
  owned(ownerType: string, ownerId: number): string[];
}

export interface DataplaneRepository {
  upsert(s: DataplaneStatus): void;
  get(id: string): DataplaneStatus | undefined;
  list(): DataplaneStatus[];
}

export interface KeyValueRepository {
  get(k: string): string | undefined;
  set(k: string, v: string): void;
}
