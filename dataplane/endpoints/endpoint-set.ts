import type { Logger } from '../../lib/logger.js';
import type { DbEndpointSpec } from '../config/endpoint-model.js';
import { DbEndpoint, DB_ENDPOINT_LIMITS, type DbEndpointLimits } from './db-endpoint.js';

export interface DbEndpointSetOptions {
  /** Local address member connections leave from (docs/security/mysql.md). */
  sourceAddress?: string;
  limits?: Partial<DbEndpointLimits>;
}

/**
 * The database endpoints a data plane serves, keyed by `address:port`. Applying a snapshot is
 * two steps, like the NodeBalancer listeners: `bind` opens the listeners that are new (nothing
 * changes if one fails), `swap` then updates the others and closes the ones that left.
 */
export class DbEndpointSet {
  private readonly endpoints = new Map<string, DbEndpoint>();
  private readonly limits: DbEndpointLimits;

  constructor(private readonly log: Logger, private readonly opts: DbEndpointSetOptions = {}) {
    this.limits = { ...DB_ENDPOINT_LIMITS, ...opts.limits };
  }

  /** Listens for every spec not served yet; returns the new endpoints and what failed. */
  async bind(specs: readonly DbEndpointSpec[]): Promise<{ fresh: DbEndpoint[]; failed: string[] }> {
    const fresh = specs.filter((s) => !this.endpoints.has(s.listenKey)).map((s) => new DbEndpoint(s, this.log, this.limits, this.opts.sourceAddress));
    const binds = await Promise.allSettled(fresh.map((e) => e.listen()));
    const failed = binds.flatMap((r, i) => (r.status === 'rejected' ? [`${fresh[i]!.key}: ${(r.reason as NodeJS.ErrnoException).code ?? (r.reason as Error).message}`] : []));
    if (failed.length > 0) for (const e of fresh) e.close();
    return { fresh, failed };
  }

  /** Serves exactly `specs`: the fresh endpoints join, the others update, the rest close. */
  swap(specs: readonly DbEndpointSpec[], fresh: DbEndpoint[]): void {
    for (const e of fresh) this.endpoints.set(e.key, e);
    const wanted = new Set<string>();
    for (const s of specs) {
      wanted.add(s.listenKey);
      const e = this.endpoints.get(s.listenKey)!;
      if (!fresh.includes(e)) e.update(s);
    }
    for (const [key, e] of this.endpoints) {
      if (wanted.has(key)) continue;
      this.endpoints.delete(key);
      e.close();
    }
  }

  has(listenKey: string): boolean {
    return this.endpoints.has(listenKey);
  }

  all(): Iterable<DbEndpoint> {
    return this.endpoints.values();
  }

  get size(): number {
    return this.endpoints.size;
  }

  stopAccepting(): void {
    for (const e of this.endpoints.values()) e.stopAccepting();
  }

  close(): void {
    for (const e of this.endpoints.values()) e.close();
    this.endpoints.clear();
  }
}
