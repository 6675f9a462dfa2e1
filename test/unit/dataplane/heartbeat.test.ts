import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { HeartbeatWatch } from '../../../dataplane/workers/heartbeat.js';

// workers/heartbeat.ts: which workers the primary takes for wedged, on a manual clock.
describe('the workers heartbeat', () => {
  const settings = { intervalMs: 1000, misses: 5 };

  it('takes a worker silent for more than the misses for wedged, once, and keeps one that answers late but within them', () => {
    const clock = new ManualClock();
    const w = new HeartbeatWatch<number>(clock, settings);
    w.heard(1);
    w.heard(2);
    for (let s = 1; s <= 5; s++) {
      clock.advance(1000);
      // Worker 2 answers every tick; worker 1 is silent.
      expect(w.tick()).toEqual([]);
      w.heard(2);
    }
    // 5 s of silence is the bound itself, not past it.
    expect(w.answering(1)).toBe(false);
    expect(w.answering(2)).toBe(true);
    clock.advance(1000);
    expect(w.tick()).toEqual([{ key: 1, silentMs: 6000 }]);
    w.heard(2);
    clock.advance(1000);
    // Reported once: the pool killed it, its exit forgets it.
    expect(w.tick()).toEqual([]);

    // Busy for 4.5 s, then answering: never reported.
    w.heard(3);
    for (let s = 0; s < 4; s++) {
      clock.advance(1000);
      w.heard(2);
      expect(w.tick()).toEqual([]);
    }
    clock.advance(500);
    w.heard(3);
    clock.advance(500);
    expect(w.tick()).toEqual([]);
    expect(w.answering(3)).toBe(true);
  });

  it('does not blame the workers when the primary itself was not running (its tick came late)', () => {
    const clock = new ManualClock();
    const w = new HeartbeatWatch<number>(clock, settings);
    w.heard(1);
    clock.advance(1000);
    expect(w.tick()).toEqual([]);
    // The primary was stopped for 30 s: its answers from the workers wait unread in the channel.
    clock.advance(30_000);
    expect(w.tick()).toEqual([]);
    expect(w.answering(1)).toBe(true);
    // If the worker really is silent, the count starts from the primary's return.
    for (let s = 0; s < 5; s++) {
      clock.advance(1000);
      expect(w.tick()).toEqual([]);
    }
    clock.advance(1000);
    expect(w.tick().map((x) => x.key)).toEqual([1]);
  });

  it('says a worker answers only within two and a half intervals of its last word', () => {
    const clock = new ManualClock();
    const w = new HeartbeatWatch<number>(clock, settings);
    expect(w.answering(7)).toBe(false);
    w.heard(7);
    clock.advance(2500);
    expect(w.answering(7)).toBe(true);
    clock.advance(1);
    expect(w.answering(7)).toBe(false);
    w.forget(7);
    w.heard(8);
    expect(w.answering(7)).toBe(false);
  });
});
