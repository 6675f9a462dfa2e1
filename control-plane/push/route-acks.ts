import type { AppliedRoutes, RoutedDatabase } from '../domain/databases/activation-gate.js';
import { regionServed } from '../domain/regions.js';
import { endpointsOf, type RegionalEndpoint } from './endpoint-builder.js';
import { contentHash, type SubscriberStatusStore } from './snapshot-cache.js';

/**
 * Which data planes have applied a database's routes (docs/databases.md, "When a database is
 * active"). Each config round says which version holds which endpoints; for every database this
 * keeps the version in which its endpoints last changed. A data plane holds them once the
 * version it ACKed is at least that one: versions only increase, and a data plane ACKs a version
 * only when it serves that whole state. The ACKed versions and who is connected are read from the
 * data planes' status in the store, which every control-plane replica writes and reads, so a
 * replica knows the ACKs of data planes connected to another. The versions of the rounds are
 * this replica's own: each replica builds every round from the same store, and the version
 * ledger gives the same content the same version on all of them.
 */
export class RouteAcks implements AppliedRoutes {
  /** Database id -> the hash of its endpoints and the version they first appeared in. */
  private readonly since = new Map<number, { hash: string; version: number }>();

  constructor(private readonly status: SubscriberStatusStore) {}

  /** One round: `endpoints` are what version `version` holds. */
  record(endpoints: readonly RegionalEndpoint[], version: number): void {
    const byDb = new Map<number, unknown[]>();
    for (const e of endpoints) {
      const id = Number(e.ep.databaseId);
      byDb.set(id, [...(byDb.get(id) ?? []), e.ep]);
    }
    for (const [id, eps] of byDb) {
      const hash = contentHash(eps);
      if (this.since.get(id)?.hash !== hash) this.since.set(id, { hash, version });
    }
    for (const id of this.since.keys()) if (!byDb.has(id)) this.since.delete(id);
  }

  async pending(db: RoutedDatabase): Promise<{ waiting: string[]; refusing: string[] }> {
    const eps = endpointsOf(db);
    if (eps.length === 0) return { waiting: [], refusing: [] };
    const hash = contentHash(eps);
    const at = this.since.get(db.id);
    const waiting: string[] = [];
    const refusing: string[] = [];
    for (const s of await this.status.list()) {
      // One not connected is not waited for: it gets a full snapshot first when it connects.
      if (!s.connected || !regionServed(s.region, db.region)) continue;
      if (s.lastError !== null) refusing.push(s.id);
      else if (!at || at.hash !== hash || s.appliedVersion < at.version) waiting.push(s.id);
    }
    return { waiting: waiting.sort(), refusing: refusing.sort() };
  }
}
