import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ManualClock } from '../../../lib/clock.js';
import { RateLimiter, WindowTable, tighter } from '../../../control-plane/api/rate-limit.js';

describe('API rate limits (fixed windows per key)', () => {
  it('counts down to 0, refuses, and opens a new window when the old one ends', () => {
    const t = new WindowTable(3, 60_000, 100);
    const seen = [0, 1, 2, 3].map(() => t.take('a', 1_000));
    expect(seen.map((v) => [v.allowed, v.remaining])).toEqual([[true, 2], [true, 1], [true, 0], [false, 0]]);
    expect(seen[3]!.resetAt).toBe(61_000);
    expect(t.take('b', 1_000).allowed).toBe(true); // another key, its own window
    expect(t.take('a', 60_999).allowed).toBe(false);
    expect(t.take('a', 61_000)).toEqual({ allowed: true, limit: 3, remaining: 2, resetAt: 121_000 });
  });

  it('keeps at most maxKeys keys, dropping the least recently seen', () => {
    const t = new WindowTable(1, 60_000, 1000);
    for (let i = 0; i < 100_000; i++) t.take(`10.${i >> 16}.${(i >> 8) & 255}.${i & 255}`, 0);
    expect(t.size).toBe(1000);
    // A key in use stays while rotating keys push others out.
    const small = new WindowTable(1, 60_000, 2);
    small.take('victim', 0);
    small.take('x', 0);
    small.take('victim', 0);
    small.take('y', 0);
    expect(small.take('victim', 0).allowed).toBe(false);
  });

  it('reports Retry-After and the X-RateLimit headers of a verdict; 0 turns a limit off', () => {
    const clock = new ManualClock(1_700_000_000_000);
    const limiter = new RateLimiter(clock, new Registry(), { perToken: 1, perIp: 0 });
    expect(limiter.takeIp('::ffff:127.0.0.1')).toBeUndefined();
    const ok = limiter.takeToken(7, 'general')!;
    clock.advance(10_500);
    const refused = limiter.takeToken(7, 'general')!;
    expect(limiter.headers(ok)).toEqual({ 'x-ratelimit-limit': '1', 'x-ratelimit-remaining': '0', 'x-ratelimit-reset': '1700000060' });
    expect(limiter.headers(refused)['retry-after']).toBe('50');
    expect(limiter.takeToken(7, 'stats')!.limit).toBe(50);
    expect(tighter(ok, refused)).toBe(refused);
  });
});
