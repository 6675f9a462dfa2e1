import { describe, expect, it } from 'vitest';
import { Mutex } from '../../../lib/mutex.js';

describe('Mutex', () => {
  it('runs callers one at a time, in the order they came', async () => {
    const m = new Mutex();
    const log: string[] = [];
    let inside = 0;
    const job = (name: string, ticks: number) => m.run(async () => {
      inside++;
      expect(inside).toBe(1);
      log.push(`${name}:start`);
      for (let i = 0; i < ticks; i++) await Promise.resolve();
      log.push(`${name}:end`);
      inside--;
      return name;
    });
    const results = await Promise.all([job('a', 5), job('b', 1), job('c', 3)]);
    expect(results).toEqual(['a', 'b', 'c']);
    expect(log).toEqual(['a:start', 'a:end', 'b:start', 'b:end', 'c:start', 'c:end']);
    expect(m.locked).toBe(false);
  });

  it('passes the lock on when a holder throws', async () => {
    const m = new Mutex();
    const failed = m.run(async () => { throw new Error('boom'); });
    const next = m.run(async () => 'ran');
    expect(m.locked).toBe(true);
    await expect(failed).rejects.toThrow('boom');
    await expect(next).resolves.toBe('ran');
    expect(m.locked).toBe(false);
  });

  it('hands over without a timer: the next caller starts within microtasks', async () => {
    const m = new Mutex();
    let second = false;
    void m.run(async () => undefined);
    void m.run(async () => { second = true; });
    for (let i = 0; i < 10 && !second; i++) await Promise.resolve();
    expect(second).toBe(true);
  });
});
