import { describe, expect, it } from 'vitest';
import { ManualClock, systemClock } from '../../../lib/clock.js';

describe('ManualClock timers', () => {
  it('fires timeouts and intervals in due order as time is advanced, with now() at their due time', () => {
    const c = new ManualClock(1000);
    const seen: string[] = [];
    c.setTimeout(() => seen.push(`b@${c.now()}`), 20);
    c.setTimeout(() => seen.push(`a@${c.now()}`), 10);
    const every = c.setInterval(() => seen.push(`i@${c.now()}`), 15);
    c.advance(9);
    expect(seen).toEqual([]);
    c.advance(21);
    expect(seen).toEqual(['a@1010', 'i@1015', 'b@1020', 'i@1030']);
    expect(c.now()).toBe(1030);
    every.cancel();
    c.advance(100);
    expect(seen).toHaveLength(4);
    expect(c.pendingTimers()).toBe(0);
  });

  it('cancelled timeouts never fire; timers set inside a timer fire in the same advance when due', () => {
    const c = new ManualClock(0);
    let fired = 0;
    c.setTimeout(() => fired++, 5).cancel();
    c.setTimeout(() => c.setTimeout(() => fired += 10, 5), 5);
    c.advance(10);
    expect(fired).toBe(10);
  });

  it('sleep resolves on advance and rejects on abort', async () => {
    const c = new ManualClock(0);
    let done = false;
    const p = c.sleep(50).then(() => (done = true));
    c.advance(49);
    await Promise.resolve();
    expect(done).toBe(false);
    c.advance(1);
    await p;
    expect(done).toBe(true);
    const ac = new AbortController();
    const q = c.sleep(50, ac.signal);
    ac.abort(new Error('stop'));
    await expect(q).rejects.toThrow('stop');
    expect(c.pendingTimers()).toBe(0);
  });

  it('set() may move time backwards without firing anything', () => {
    const c = new ManualClock(100);
    let fired = false;
    c.setTimeout(() => (fired = true), 10);
    c.set(50);
    expect(fired).toBe(false);
    expect(c.now()).toBe(50);
  });

  it('system clock sleeps for real', async () => {
    const t0 = Date.now();
    await systemClock.sleep(20);
    expect(Date.now() - t0).toBeGreaterThanOrEqual(15);
  });
});
