/**
 * Time behind an interface so that schedules, windows, expiries and stats buckets are pure
 * functions of an injected clock and tests can move time without sleeping.
 */
export interface Clock {
  /** Milliseconds since the Unix epoch. */
  now(): number;
}

export const systemClock: Clock = { now: () => Date.now() };

/** A clock tests set and advance by hand. */
export class ManualClock implements Clock {
  constructor(private ms: number = Date.UTC(2024, 0, 1)) {}
  now(): number {
    return this.ms;
  }
  set(ms: number): void {
    this.ms = ms;
  }
  advance(ms: number): void {
    this.ms += ms;
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
