import type { Clock } from '../../lib/clock.js';

const TTL_MS = 30 * 60 * 1000;
const MAX_ENTRIES = 1_000_000;

/**
 * Stickiness `table`: client IP -> node, valid for 30 minutes from when the entry was added (not
 * refreshed on use, as the NodeBalancer documents). Entries for a node that goes down or is set to
 * reject are dropped by the owner (dropNode).
 */
export class StickyTable<N> {
  private readonly entries = new Map<string, { node: N; added: number }>();

  constructor(private readonly clock: Clock, private readonly ttlMs = TTL_MS) {}

  get(ip: string): N | undefined {
    const e = this.entries.get(ip);
    if (!e) return undefined;
    if (this.clock.now() - e.added >= this.ttlMs) {
      this.entries.delete(ip);
      return undefined;
    }
    return e.node;
  }

  /** `added`: when the entry was made (another process's table may have made it first). */
  set(ip: string, node: N, added?: number): void {
    // Re-insert so that the Map's order stays the order of addition: expired entries are then
    // always at the front and are trimmed here, a few at a time, instead of by a full sweep.
    this.entries.delete(ip);
    const now = this.clock.now();
    let trimmed = 0;
    for (const [key, e] of this.entries) {
      if (trimmed >= 8 || now - e.added < this.ttlMs) break;
      this.entries.delete(key);
      trimmed++;
    }
    if (this.entries.size >= MAX_ENTRIES) this.sweep();
    this.entries.set(ip, { node, added: added ?? now });
  }

  /** The entry with its age, or undefined (expired entries count as none). */
  entry(ip: string): { node: N; added: number } | undefined {
    return this.get(ip) === undefined ? undefined : this.entries.get(ip);
  }

  delete(ip: string): void {
    this.entries.delete(ip);
  }

  dropNode(node: N): void {
    for (const [ip, e] of this.entries) if (e.node === node) this.entries.delete(ip);
  }

  private sweep(): void {
    const now = this.clock.now();
    for (const [ip, e] of this.entries) if (now - e.added >= this.ttlMs) this.entries.delete(ip);
    // Still full: drop the oldest (Map keeps insertion order).
    for (const ip of this.entries.keys()) {
      if (this.entries.size < MAX_ENTRIES) break;
      this.entries.delete(ip);
    }
  }
}
