import type { Clock } from '../../lib/clock.js';
import { ConcurrencyCap } from '../../lib/conn-cap.js';

/**
 * client_conn_throttle: at most `limit` new connections per client IP in any sliding second,
 * per NodeBalancer. Only admitted connections count, so a client that keeps retrying gets back in
 * as soon as its rate drops (the refused ones are closed at once, see docs/dataplane.md).
 * Beside it, one per NodeBalancer as well, the NodeBalancer's concurrent caps (per client IP and
 * in all), which `ConnLimits` (conn-limits.ts) checks and counts at accept.
 */
export class ConnThrottle {
  private readonly seen = new Map<string, number[]>();
  private lastSweep = 0;
  readonly concurrent: ConcurrencyCap;

  constructor(public limit: number, private readonly clock: Clock, perClient = 0, total = 0) {
    this.concurrent = new ConcurrencyCap(perClient, total);
  }

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
