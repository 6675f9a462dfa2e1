import { systemClock, type Clock, type Timer } from '../../lib/clock.js';

/**
 * Clocks for processes whose timers must keep running in real time (push coalescing, the
 * PostgreSQL lease, stream loops) while a test moves what `now()` says: a control plane cannot run
 * on a ManualClock, whose timers fire only when the test moves it.
 */

/**
 * `now()` read from another clock (a test's ManualClock), timers in real time. After each move of
 * the source, time also flows in real time for up to `flowsForMs` and then stands again, so
 * times the process records (an agent's last report) still increase while the test waits, and a
 * test that sets 23:59:30 stays before midnight.
 */
export function readingClock(source: Pick<Clock, 'now'>, flowsForMs = 29_000): Clock {
  let seen = source.now();
  let movedAt = Date.now();
  return {
    ...systemClock,
    now: () => {
      const at = source.now();
      if (at !== seen) {
        seen = at;
        movedAt = Date.now();
      }
      return at + Math.min(Date.now() - movedAt, flowsForMs);
    },
  };
}

/**
 * Real time shifted by an offset the test moves forward, one per process. `kill()` stands for
 * the process dying: every timer it started stops, and new ones never fire.
 */
export class ShiftedClock implements Clock {
  private offset = 0;
  private dead = false;
  private readonly timers = new Set<Timer>();

  constructor(startMs: number = Date.now()) {
    this.offset = startMs - Date.now();
  }

  now(): number {
    return Date.now() + this.offset;
  }

  /** Moves `now()` to `ms` (only forward; timers keep their real-time periods). */
  set(ms: number): void {
    this.offset = Math.max(this.offset, ms - Date.now());
  }

  setTimeout(fn: () => void, ms: number): Timer {
    return this.track(systemClock.setTimeout(() => this.dead || fn(), ms));
  }

  setInterval(fn: () => void, ms: number): Timer {
    return this.track(systemClock.setInterval(() => this.dead || fn(), ms));
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return systemClock.sleep(ms, signal);
  }

  kill(): void {
    this.dead = true;
    for (const t of this.timers) t.cancel();
    this.timers.clear();
  }

  private track(t: Timer): Timer {
    if (this.dead) {
      t.cancel();
      return t;
    }
    this.timers.add(t);
    return { cancel: () => {
      t.cancel();
      this.timers.delete(t);
    } };
  }
}
