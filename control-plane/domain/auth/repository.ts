import type { Grants, TokenRecord, User } from './model.js';

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
