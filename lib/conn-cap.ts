/**
 * Concurrent connection caps for an L4 listener (docs/security/traffic.md): at most `perKey`
 * connections open per key (a client key, lib/client-key.ts) and `total` in all. `admit` counts a
 * connection in and says which cap refused it otherwise; `release` counts it out. A `weight`
 * counts one entry as that many units (the data plane's per-client total counts a UDP session as
 * a fraction of a connection). Only numbers in a map, so a busy accept path does not allocate
 * beyond the map entry of a new key.
 */
export type CapRefusal = 'per_key' | 'total';

export class ConcurrencyCap {
  private readonly open = new Map<string, number>();
  private count = 0;

  /** 0 (or less) disables a cap. */
  constructor(public perKey: number, public total: number) {}

  /** Would `key` be refused now? Nothing is counted. */
  check(key: string, weight = 1): CapRefusal | null {
    if (this.total > 0 && this.count + weight > this.total) return 'total';
    if (this.perKey > 0 && (this.open.get(key) ?? 0) + weight > this.perKey) return 'per_key';
    return null;
  }

  /** Counts a connection in (call after `check` said null, or to count unconditionally). */
  add(key: string, weight = 1): void {
    this.count += weight;
    this.open.set(key, (this.open.get(key) ?? 0) + weight);
  }

  admit(key: string, weight = 1): CapRefusal | null {
    const r = this.check(key, weight);
    if (r === null) this.add(key, weight);
    return r;
  }

  release(key: string, weight = 1): void {
    const n = this.open.get(key);
    if (n === undefined) return;
    const w = Math.min(weight, n);
    this.count -= w;
    if (n <= w) this.open.delete(key);
    else this.open.set(key, n - w);
  }

  /** Connections open now (all keys). */
  get size(): number {
    return this.count;
  }

  /** Connections open now for one key. */
  of(key: string): number {
    return this.open.get(key) ?? 0;
  }
}
