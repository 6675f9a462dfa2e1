/**
 * Concurrent connection caps for an L4 listener (docs/security/traffic.md): at most `perKey`
 * connections open per key (a client IP) and `total` in all. `admit` counts a connection in and
 * says which cap refused it otherwise; `release` counts it out. Only numbers in a map, so a busy
 * accept path does not allocate beyond the map entry of a new key.
 */
export type CapRefusal = 'per_key' | 'total';

export class ConcurrencyCap {
  private readonly open = new Map<string, number>();
  private count = 0;

  /** 0 (or less) disables a cap. */
  constructor(public perKey: number, public total: number) {}

  /** Would `key` be refused now? Nothing is counted. */
  check(key: string): CapRefusal | null {
    if (this.total > 0 && this.count >= this.total) return 'total';
    if (this.perKey > 0 && (this.open.get(key) ?? 0) >= this.perKey) return 'per_key';
    return null;
  }

  /** Counts a connection in (call after `check` said null, or to count unconditionally). */
  add(key: string): void {
    this.count++;
    this.open.set(key, (this.open.get(key) ?? 0) + 1);
  }

  admit(key: string): CapRefusal | null {
    const r = this.check(key);
    if (r === null) this.add(key);
    return r;
  }

  release(key: string): void {
    const n = this.open.get(key);
    if (n === undefined) return;
    this.count--;
    if (n <= 1) this.open.delete(key);
    else this.open.set(key, n - 1);
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
