/**
 * A map that keeps at most `max` entries and, when full, forgets the one used longest ago, rather
 * than forgetting everything at once (which made every cache cold together and, for the notices
 * logged once, let the same lines flood the log again). A Map keeps insertion order, so the first
 * key is the least recently used one when every use re-inserts its key.
 */
export class LruMap<K, V> {
  private readonly map = new Map<K, V>();

  constructor(readonly max: number) {
    if (!Number.isInteger(max) || max < 1) throw new RangeError(`LruMap: max must be a positive integer, not ${max}`);
  }

  /** The value, counting as a use. */
  get(key: K): V | undefined {
    if (!this.map.has(key)) return undefined;
    const value = this.map.get(key) as V;
    this.map.delete(key);
    this.map.set(key, value);
    return value;
  }

  /** Whether the key is there, counting as a use. */
  has(key: K): boolean {
    return this.get(key) !== undefined || this.map.has(key);
  }

  set(key: K, value: V): this {
    this.map.delete(key);
    this.map.set(key, value);
    if (this.map.size > this.max) this.map.delete(this.map.keys().next().value as K);
    return this;
  }

  delete(key: K): boolean {
    return this.map.delete(key);
  }

  get size(): number {
    return this.map.size;
  }
}
