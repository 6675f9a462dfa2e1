import type { Clock } from '../../lib/clock.js';

/**
 * client_conn_throttle: at most `limit` new connections per client IP in any sliding second,
 * per NodeBalancer. Only admitted connections count, so a client that keeps retrying gets back in
 * as soon as its rate drops (the refused ones are closed at once, see docs/dataplane.md).
 */
export class ConnThrottle {
  private readonly seen = new Map<string, number[]>();
  private lastSweep = 0;

  constructor(public limit: number, private readonly clock: Clock) {}

  allow(ip: string): boolean {
    if (this.limit <= 0) return true;
    const now = this.clock.now();
    if (now - this.lastSweep > 10_000) this.sweep(now);
    let times = this.seen.get(ip);
    if (!times) {
      times = [];
      this.seen.set(ip, times);
    }
    while (times.length > 0 && now - times[0] >= 1000) times.shift();
    if (times.length >= this.limit) return false;
    times.push(now);
    return true;
  }

  private sweep(now: number): void {
    this.lastSweep = now;
    for (const [ip, times] of this.seen) {
      if (times.length === 0 || now - times[times.length - 1] >= 1000) this.seen.delete(ip);
    }
  }
}
