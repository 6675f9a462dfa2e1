import type { Clock } from '../../lib/clock.js';

/**
 * When the primary last heard from each worker (docs/dataplane.md, "Workers", a worker that
 * stops answering). The primary pings every worker each interval over the IPC channel; any
 * message a worker sends (the pong, counters, admission requests) shows that its event loop runs.
 * A worker silent for more than `misses` intervals is wedged (stopped, looping, hung in a
 * syscall) and is replaced like one that exited.
 */
export interface HeartbeatSettings {
  /** How often the primary pings each worker. */
  intervalMs: number;
  /** How many intervals a worker may stay silent before it is taken for wedged. */
  misses: number;
}

/**
 * 1 s and 5 misses: a worker is killed after 5 s without a word. A busy worker still answers:
 * its slowest steps are sliced (a whole state's build, 100 NodeBalancers per turn) and a ping is
 * one event-loop turn, so at a load average of 15 on 2 cores its answer comes within tens of
 * milliseconds to a second; 5 s of silence is a stopped process, not a busy one.
 */
export const DEFAULT_HEARTBEAT: HeartbeatSettings = { intervalMs: 1000, misses: 5 };

/**
 * How recently some worker must have answered for the data plane to say it serves (the pair
 * mode's liveness check, vrrp/alive-server.ts): two and a half intervals, so one late pong does
 * not fail the check, while workers that all stopped fail it well before they are replaced.
 */
export const SERVING_WINDOW_INTERVALS = 2.5;

/** Why a worker was replaced: it exited, stopped answering the heartbeat, or hung in an apply. */
export type ReplaceReason = 'exited' | 'unresponsive' | 'apply_timeout';

export class HeartbeatWatch<K> {
  private readonly last = new Map<K, number>();
  private lastTick: number;

  constructor(private readonly clock: Clock, private readonly s: HeartbeatSettings) {
    this.lastTick = clock.now();
  }

  /** The worker was heard from: its event loop runs. */
  heard(k: K): void {
    this.last.set(k, this.clock.now());
  }

  /** The worker is gone; nothing more is expected of it. */
  forget(k: K): void {
    this.last.delete(k);
  }

  /**
   * Called once per interval, before the pings go out: the workers silent for more than `misses`
   * intervals, each returned once (then forgotten). When this tick itself came late by more than
   * an interval, the primary was the one not running (stopped, or its loop held by a large
   * decode): the workers' answers still wait unread in the channel, so everyone gets a fresh
   * window instead of being taken for wedged.
   */
  tick(): { key: K; silentMs: number }[] {
    const now = this.clock.now();
    const late = now - this.lastTick > 2 * this.s.intervalMs;
    this.lastTick = now;
    if (late) {
      for (const k of this.last.keys()) this.last.set(k, now);
      return [];
    }
    const out: { key: K; silentMs: number }[] = [];
    const limit = this.s.intervalMs * this.s.misses;
    for (const [k, at] of this.last) {
      if (now - at <= limit) continue;
      out.push({ key: k, silentMs: now - at });
      this.last.delete(k);
    }
    return out;
  }

  /** Whether the worker was heard from within the serving window. */
  answering(k: K): boolean {
    const at = this.last.get(k);
    return at !== undefined && this.clock.now() - at <= this.s.intervalMs * SERVING_WINDOW_INTERVALS;
  }
}
