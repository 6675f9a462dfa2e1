/**
 * Time behind an interface so that schedules, windows, expiries, timeouts and stats buckets are
 * functions of an injected clock and tests can move time without sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
  /** Runs `fn` once after `ms`; the returned timer does not keep the process alive. */
  setTimeout(fn: () => void, ms: number): Timer;
  /** Runs `fn` every `ms` until cancelled; does not keep the process alive. */
  setInterval(fn: () => void, ms: number): Timer;
  /** Resolves after `ms`; rejects with the signal's reason when `signal` aborts first. */
  sleep(ms: number, signal?: AbortSignal): Promise<void>;
}

export interface Timer {
  cancel(): void;
}

function abortReason(signal: AbortSignal): unknown {
  return signal.reason ?? new Error('aborted');
}

/** Sleep on top of a clock's own setTimeout, so a manual clock's advance() wakes sleepers. */
function sleepOn(clock: Pick<Clock, 'setTimeout'>, ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    if (signal?.aborted) return reject(abortReason(signal));
    const onAbort = () => {
      timer.cancel();
      reject(abortReason(signal!));
    };
    const timer = clock.setTimeout(() => {
      signal?.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal?.addEventListener('abort', onAbort, { once: true });
  });
}

/** Wall time and Node's timers, unref'd: a pending timer never holds a stopping process open. */
export const systemClock: Clock = {
  now: () => Date.now(),
  setTimeout(fn, ms) {
    const t = setTimeout(fn, ms);
    t.unref();
    return { cancel: () => clearTimeout(t) };
  },
  setInterval(fn, ms) {
    const t = setInterval(fn, ms);
    t.unref();
    return { cancel: () => clearInterval(t) };
  },
  sleep(ms, signal) {
    return sleepOn(systemClock, ms, signal);
  },
};

interface PendingTimer {
  at: number;
  seq: number;
  every: number | undefined;
  fn: () => void;
  cancelled: boolean;
}

/**
 * A clock tests set and advance by hand. Its timers fire only when time is moved past them
 * (advance or set), in due order, each seeing now() equal to its due time.
 */
export class ManualClock implements Clock {
  private readonly timers: PendingTimer[] = [];
  private seq = 0;

  constructor(private ms: number = Date.UTC(2024, 0, 1)) {}

  now(): number {
    return this.ms;
  }

  set(ms: number): void {
    this.runUntil(ms);
  }

  advance(ms: number): void {
    this.runUntil(this.ms + ms);
  }

  setTimeout(fn: () => void, ms: number): Timer {
    return this.schedule(fn, ms, undefined);
  }

  setInterval(fn: () => void, ms: number): Timer {
    return this.schedule(fn, ms, Math.max(1, ms));
  }

  sleep(ms: number, signal?: AbortSignal): Promise<void> {
    return sleepOn(this, ms, signal);
  }

  /** Timers not yet fired or cancelled (for tests that check nothing was left behind). */
  pendingTimers(): number {
    return this.timers.filter((t) => !t.cancelled).length;
  }

  private schedule(fn: () => void, ms: number, every: number | undefined): Timer {
    const t: PendingTimer = { at: this.ms + Math.max(0, ms), seq: this.seq++, every, fn, cancelled: false };
    this.timers.push(t);
    return {
      cancel: () => {
        t.cancelled = true;
      },
    };
  }

  private runUntil(target: number): void {
    for (;;) {
      let next: PendingTimer | undefined;
      for (const t of this.timers) {
        if (t.cancelled || t.at > target) continue;
        if (!next || t.at < next.at || (t.at === next.at && t.seq < next.seq)) next = t;
      }
      if (!next) break;
      this.ms = Math.max(this.ms, next.at);
      if (next.every === undefined) next.cancelled = true;
      else next.at += next.every;
      next.fn();
    }
    for (let i = this.timers.length - 1; i >= 0; i--) if (this.timers[i]!.cancelled) this.timers.splice(i, 1);
    this.ms = target;
  }
}

/** Linode wire timestamps: UTC, `YYYY-MM-DDTHH:MM:SS`, no zone, no fraction. */
export function wireTime(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19);
}

/** Parses a wire timestamp (zone-less, taken as UTC); NaN when malformed. */
export function parseWireTime(s: string): number {
  if (!/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/.test(s)) return Number.NaN;
  return Date.parse(`${s}Z`);
}
