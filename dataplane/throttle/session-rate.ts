import type { Clock } from '../../lib/clock.js';

interface Bucket {
  tokens: number;
  at: number;
}

/**
 * New UDP sessions per client key, over the whole data plane (docs/security/traffic.md "UDP"): a
 * token bucket per key that refills `rate` tokens a second up to `burst`; a new session takes a
 * token or is refused. At most `maxKeys` keys are tracked, so a spoofer inventing sources costs
 * bounded memory: a key whose bucket has refilled says nothing and is dropped first; when every
 * tracked key is still spending, the least recently used goes (it starts again with a full
 * bucket, the price of the bound).
 */
export class SessionRate {
  private readonly buckets = new Map<string, Bucket>();
  private lastSweep = 0;

  /** `rate` 0 (or less) turns the limit off. */
  constructor(readonly rate: number, readonly burst: number, private readonly maxKeys: number, private readonly clock: Clock) {}

  /** Keys tracked now (tests, and the bound above). */
  get size(): number {
    return this.buckets.size;
  }

  /** Takes a token for `key`: false when its bucket is empty. */
  take(key: string): boolean {
    if (this.rate <= 0) return true;
    const now = this.clock.now();
    let b = this.buckets.get(key);
    if (b === undefined) {
      if (this.buckets.size >= this.maxKeys) this.makeRoom(now);
      b = { tokens: this.burst, at: now };
    } else {
      // Re-inserted below, so Map order is recency.
      this.buckets.delete(key);
      b.tokens = this.level(b, now);
      b.at = now;
    }
    this.buckets.set(key, b);
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

  /** Gives back the token `take` just took (the session was refused by a later check). */
  refund(key: string): void {
    const b = this.buckets.get(key);
    if (b !== undefined) b.tokens = Math.min(this.burst, b.tokens + 1);
  }

  private level(b: Bucket, now: number): number {
    return Math.min(this.burst, b.tokens + ((now - b.at) * this.rate) / 1000);
  }

  private makeRoom(now: number): void {
    // A full sweep at most once a second: between sweeps, the least recently used key goes.
    if (now - this.lastSweep >= 1000) {
      this.lastSweep = now;
      for (const [key, b] of this.buckets) if (this.level(b, now) >= this.burst) this.buckets.delete(key);
    }
    while (this.buckets.size >= this.maxKeys) this.buckets.delete(this.buckets.keys().next().value!);
  }
}
