import { describe, expect, it } from 'vitest';
import { LruMap } from '../../../lib/lru.js';

describe('LruMap', () => {
  it('forgets only the entry used longest ago when full', () => {
    const m = new LruMap<string, number>(3);
    m.set('a', 1).set('b', 2).set('c', 3);
    expect(m.get('a')).toBe(1); // a is now the most recent
    m.set('d', 4);
    expect(m.size).toBe(3);
    expect(m.has('b')).toBe(false);
    expect([m.get('a'), m.get('c'), m.get('d')]).toEqual([1, 3, 4]);
  });

  it('counts has() as a use, overwrites without growing, and keeps undefined values', () => {
    const m = new LruMap<string, number | undefined>(2);
    m.set('a', undefined).set('b', 2);
    expect(m.has('a')).toBe(true);
    m.set('b', 3);
    expect(m.size).toBe(2);
    m.set('c', 4);
    expect(m.has('a')).toBe(false);
    expect(m.get('b')).toBe(3);
    expect(m.delete('b')).toBe(true);
    expect(m.size).toBe(1);
  });

  it('refuses a size that is not a positive integer', () => {
    expect(() => new LruMap(0)).toThrow(RangeError);
    expect(() => new LruMap(1.5)).toThrow(RangeError);
  });
});
