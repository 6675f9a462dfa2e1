import type { EventRecord } from './model.js';

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
