import { Worker } from 'node:worker_threads';
import { WORKER_SOURCE } from './body-match-worker.js';

/** How long one check_body match may run before it counts as failed (docs/dataplane.md). */
export const MATCH_TIME_LIMIT_MS = 100;

/**
 * The matcher's limits (docs/dataplane.md, "Health checks"). Every one bounds what a tenant's
 * pattern and backends can take from the one worker that all configs share.
 */
export interface MatcherLimits {
  /** A match still running after this is abandoned; the check fails and the config is quarantined. */
  readonly timeLimitMs: number;
  /** How long a quarantined config's pattern is not run (its checks fail meanwhile). */
  readonly quarantineMs: number;
  /** Match time one config may use within `cpuWindowMs` before it is quarantined. */
  readonly cpuBudgetMs: number;
  readonly cpuWindowMs: number;
  /** Match time a config may use per turn before the next config's matches run. */
  readonly quantumMs: number;
  /** Matches waiting per config, and over all configs; beyond them a check fails at once. */
  readonly maxQueuedPerConfig: number;
  readonly maxQueued: number;
}

export const DEFAULT_MATCHER_LIMITS: MatcherLimits = {
  timeLimitMs: MATCH_TIME_LIMIT_MS,
  quarantineMs: 60_000,
  // A tenth of the worker for one config. A plain pattern on a 16 KiB body takes microseconds:
  // a config with 1,000 nodes checked every 2 s uses a few ms per second.
  cpuBudgetMs: 1_000,
  cpuWindowMs: 10_000,
  quantumMs: 5,
  maxQueuedPerConfig: 256,
  // Each waiting match holds a body window of up to 16 KiB: 32 MiB at most.
  maxQueued: 2048,
};

/** Whose match it is: matches are queued, timed and quarantined per config. */
export interface MatchOwner {
  readonly nodebalancerId: number;
  readonly configId: number;
}

/**
 * `timeout`: the match ran over the time limit. `quarantined`: the config's pattern is not run
 * for now. `queue_full`: too many matches were waiting. `cancelled`: the probe ended first.
 */
export type MatchResult = 'match' | 'no_match' | 'timeout' | 'quarantined' | 'queue_full' | 'cancelled';

interface Job {
  readonly lane: Lane;
  readonly source: string;
  readonly flags: string;
  readonly text: string;
  readonly resolve: (r: MatchResult) => void;
  readonly signal: AbortSignal | undefined;
  readonly onAbort: () => void;
}

/**
 * One config's pattern: its waiting matches, its turn (deficit round robin: `deficit` is the
 * match time it may still use this turn, negative after a long match) and the match time it
 * used in the last `cpuWindowMs`, in one-second slots.
 */
interface Lane {
  readonly key: string;
  readonly owner: MatchOwner;
  readonly source: string;
  readonly flags: string;
  readonly queue: Job[];
  deficit: number;
  inRing: boolean;
  quarantinedUntil: number;
  readonly slotAt: number[];
  readonly slotMs: number[];
  lastUsed: number;
  /** When a match of it last ran over the time limit. */
  overrunAt: number;
}

const SLOT_MS = 1000;

/** A matching thread; `started` holds the number of the match it started last, then of the one it finished last. */
interface Thread {
  readonly w: Worker;
  ready: boolean;
  readonly started: Int32Array;
}

/**
 * check_body regexes are tenant input, and a JavaScript regex can backtrack for seconds
 * (`^(a+)+$` against `aaaa…b`) or for tens of milliseconds per match on a 16 KiB body
 * (`.*a.*b`). They are therefore never run on the event loop that carries traffic: one worker
 * thread runs the matches one at a time (a spare waits beside it), and since every config shares it, its time is shared
 * out per config (docs/security/traffic.md):
 * - each config (with its pattern) has its own queue, bounded; the worker serves the queues by
 *   deficit round robin on measured match time, so a config whose matches take 80 ms waits
 *   about 16 turns of the others after each one, and a config with cheap matches runs many per turn;
 * - a match whose probe ended (timed out, checker stopped) leaves its queue unrun;
 * - a match still running `timeLimitMs` after it started is abandoned (its thread is terminated,
 *   which interrupts the regex, and the spare thread takes the queues) and counts as
 *   `timeLimitMs` used;
 * - a config whose matches used more than `cpuBudgetMs` within `cpuWindowMs`, or ran over the
 *   time limit twice within it, is quarantined: its pattern is not run for `quarantineMs` and
 *   its checks fail meanwhile. A changed pattern starts afresh.
 * Real clocks: they bound real CPU time, not scheduled behaviour.
 */
export class BodyMatcher {
  /** The thread running matches, and a spare started beside it so that a match cut at the
   * time limit does not leave every config waiting while a new thread boots. */
  private active: Thread | null = null;
  private spare: Thread | null = null;
  /** Number of the match posted last; the thread stores it when the match starts. */
  private seq = 0;
  /** Times the time limit was re-armed for the match in flight (not started yet, or answered but unread). */
  private rearmed = 0;
  private readonly lanes = new Map<string, Lane>();
  /** Lanes with waiting matches, in turn order; the first one's turn is now. */
  private readonly ring: Lane[] = [];
  private queued = 0;
  private current: Job | null = null;
  private timer: NodeJS.Timeout | null = null;
  private lastSweep = 0;
  /** Matches abandoned at the time limit (a metric). */
  timeouts = 0;
  /** Matches dropped before they ran, by reason (a metric). */
  readonly dropped = { probe_ended: 0, queue_full: 0 };
  /** Configs quarantined, by reason (a metric). */
  readonly quarantines = { time_limit: 0, cpu_budget: 0 };

  constructor(
    private readonly limits: MatcherLimits = DEFAULT_MATCHER_LIMITS,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /**
   * Matches `re` against `text` for `owner`'s check. Never rejects. Aborting `signal` (the probe
   * ended) drops the match if it has not started; one already running ends within the time limit.
   */
  match(owner: MatchOwner, re: RegExp, text: string, signal?: AbortSignal): Promise<MatchResult> {
    if (signal?.aborted) return Promise.resolve('cancelled');
    const now = this.now();
    this.sweep(now);
    const lane = this.lane(owner, re);
    if (lane.quarantinedUntil > now) return Promise.resolve('quarantined');
    lane.lastUsed = now;
    if (lane.queue.length >= this.limits.maxQueuedPerConfig || (this.queued >= this.limits.maxQueued && !this.shedFrom(lane))) {
      this.dropped.queue_full++;
      return Promise.resolve('queue_full');
    }
    return new Promise((resolve) => {
      const job: Job = { lane, source: re.source, flags: re.flags, text, resolve, signal, onAbort: () => this.cancel(job) };
      signal?.addEventListener('abort', job.onAbort, { once: true });
      lane.queue.push(job);
      this.queued++;
      if (!lane.inRing) {
        lane.inRing = true;
        // Its first turn comes with credit; a lane still in debt waits until it is repaid.
        if (lane.deficit >= 0) lane.deficit = this.limits.quantumMs;
        this.ring.push(lane);
      }
      this.pump();
    });
  }

  /** The configs whose pattern is quarantined now, as `nodebalancerId/configId` (a metric). */
  quarantinedConfigs(): Set<string> {
    const now = this.now();
    const out = new Set<string>();
    for (const l of this.lanes.values()) if (l.quarantinedUntil > now) out.add(`${l.owner.nodebalancerId}/${l.owner.configId}`);
    return out;
  }

  /** Stops the threads; queued matches fail. */
  close(): void {
    for (const t of [this.active, this.spare]) if (t) void t.w.terminate();
    this.active = null;
    this.spare = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const jobs = this.current ? [this.current] : [];
    this.current = null;
    for (const lane of this.ring) jobs.push(...lane.queue.splice(0));
    this.ring.length = 0;
    this.queued = 0;
    for (const l of this.lanes.values()) l.inRing = false;
    for (const j of jobs) this.settle(j, 'timeout');
  }

  private lane(owner: MatchOwner, re: RegExp): Lane {
    const key = `${owner.nodebalancerId}/${owner.configId}/${re.flags}/${re.source}`;
    let lane = this.lanes.get(key);
    if (lane === undefined) {
      const slots = Math.max(1, Math.ceil(this.limits.cpuWindowMs / SLOT_MS));
      lane = {
        key, owner: { nodebalancerId: owner.nodebalancerId, configId: owner.configId }, source: re.source, flags: re.flags, queue: [],
        deficit: 0, inRing: false, quarantinedUntil: 0, slotAt: new Array<number>(slots).fill(-1), slotMs: new Array<number>(slots).fill(0), lastUsed: 0, overrunAt: -Infinity,
      };
      this.lanes.set(key, lane);
    }
    return lane;
  }

  /** Lanes of configs that stopped checking (removed, pattern changed) are forgotten once idle. */
  private sweep(now: number): void {
    if (now - this.lastSweep < this.limits.cpuWindowMs) return;
    this.lastSweep = now;
    for (const [key, l] of this.lanes) {
      if (!l.inRing && this.current?.lane !== l && l.quarantinedUntil <= now && now - l.lastUsed > this.limits.cpuWindowMs) this.lanes.delete(key);
    }
  }

  /** Every queue together is full: the longest gives up its newest match, unless that is `lane`'s. */
  private shedFrom(lane: Lane): boolean {
    let longest = lane;
    for (const l of this.ring) if (l.queue.length > longest.queue.length) longest = l;
    if (longest === lane) return false;
    const job = longest.queue.pop()!;
    this.unqueued(longest);
    this.dropped.queue_full++;
    this.settle(job, 'queue_full');
    return true;
  }

  private cancel(job: Job): void {
    const i = job.lane.queue.indexOf(job);
    // Already running (or done): it ends within the time limit and its result is ignored.
    if (i < 0) return;
    job.lane.queue.splice(i, 1);
    this.unqueued(job.lane);
    this.dropped.probe_ended++;
    job.resolve('cancelled');
  }

  private unqueued(lane: Lane): void {
    this.queued--;
    if (lane.queue.length === 0 && lane.inRing) {
      lane.inRing = false;
      this.ring.splice(this.ring.indexOf(lane), 1);
      // Unused credit does not carry over to a later turn; debt does, so a config whose
      // matches are slow cannot start afresh by having one match at a time.
      lane.deficit = Math.min(lane.deficit, 0);
    }
  }

  private pump(): void {
    if (this.current !== null) return;
    const now = this.now();
    let lane: Lane | undefined;
    while (lane === undefined && this.ring.length > 0) {
      const head = this.ring[0];
      if (head.quarantinedUntil > now) {
        // Quarantined while its matches waited: they fail now rather than run.
        for (const j of head.queue.splice(0)) {
          this.queued--;
          this.settle(j, 'quarantined');
        }
        head.inRing = false;
        this.ring.shift();
      } else if (head.deficit <= 0) {
        // Its turn is over: credit for the next one, at the back (in debt, it waits turns).
        head.deficit += this.limits.quantumMs;
        if (this.ring.length > 1) this.ring.push(this.ring.shift()!);
      } else {
        lane = head;
      }
    }
    if (lane === undefined) return;
    if (this.active === null) {
      this.active = this.spare ?? this.spawn();
      this.spare = null;
    }
    // The time limit starts when the thread can run it, not while a new one boots.
    if (!this.active.ready) return;
    // The spare is started once the active thread is up, not beside it while both boot.
    if (this.spare === null) this.spare = this.spawn();
    const job = lane.queue.shift()!;
    this.unqueued(lane);
    this.current = job;
    this.seq = (this.seq + 1) | 0;
    this.rearmed = 0;
    this.timer = setTimeout(this.onTimeout, this.limits.timeLimitMs);
    this.active.w.postMessage({ seq: this.seq, key: `${job.flags}/${job.source}`, source: job.source, flags: job.flags, text: job.text });
  }

  private spawn(): Thread {
    const started = new SharedArrayBuffer(8);
    const t: Thread = { w: new Worker(WORKER_SOURCE, { eval: true, workerData: started }), ready: false, started: new Int32Array(started) };
    // Health checks must not keep a closing process alive.
    t.w.unref();
    t.w.on('message', (m: { ready?: true; ok: boolean; ms: number }) => {
      if (m.ready) {
        t.ready = true;
        if (this.active === t) this.pump();
      } else if (this.active === t) {
        this.finish(m.ok ? 'match' : 'no_match', m.ms);
      }
    });
    t.w.on('error', () => this.lost(t));
    t.w.on('exit', () => this.lost(t));
    return t;
  }

  /** A thread died on its own: the match in flight fails, another thread takes the queues. */
  private lost(t: Thread): void {
    if (this.spare === t) this.spare = null;
    if (this.active !== t) return;
    this.active = null;
    if (this.current !== null) this.finish('timeout', 0);
    else this.pump();
  }

  private readonly onTimeout = (): void => {
    const t = this.active;
    // On a loaded machine the match may not have started yet (the message had not reached the
    // thread), or may be over with its answer not yet read by this busy thread: the limit is on
    // the match itself, so wait again, up to ten times.
    if (t !== null && (Atomics.load(t.started, 0) !== this.seq || Atomics.load(t.started, 1) === this.seq) && this.rearmed < 10) {
      this.rearmed++;
      this.timer = setTimeout(this.onTimeout, this.limits.timeLimitMs);
      return;
    }
    this.active = null;
    if (t) {
      t.w.removeAllListeners();
      t.w.on('error', () => undefined);
      void t.w.terminate();
    }
    this.timeouts++;
    const lane = this.current?.lane;
    if (lane !== undefined) {
      // The limit is wall time, and a loaded machine can hold a thread back for that long: one
      // overrun fails the check, a second within the window quarantines the pattern.
      const now = this.now();
      if (now - lane.overrunAt < this.limits.cpuWindowMs) this.quarantine(lane, 'time_limit');
      lane.overrunAt = now;
    }
    this.finish('timeout', this.limits.timeLimitMs);
  };

  private quarantine(lane: Lane, reason: keyof BodyMatcher['quarantines']): void {
    if (lane.quarantinedUntil > this.now()) return;
    lane.quarantinedUntil = this.now() + this.limits.quarantineMs;
    // What it used before does not count again once the quarantine is over.
    lane.slotAt.fill(-1);
    lane.slotMs.fill(0);
    lane.overrunAt = -Infinity;
    this.quarantines[reason]++;
  }

  /** Charges a match's time to its lane: its turn, and its budget over the window. */
  private charge(lane: Lane, ms: number): void {
    lane.deficit -= ms;
    const now = this.now();
    const slot = Math.floor(now / SLOT_MS);
    const n = lane.slotAt.length;
    const i = slot % n;
    if (lane.slotAt[i] !== slot) {
      lane.slotAt[i] = slot;
      lane.slotMs[i] = 0;
    }
    lane.slotMs[i] += ms;
    let used = 0;
    for (let k = 0; k < n; k++) if (lane.slotAt[k] > slot - n) used += lane.slotMs[k];
    if (used > this.limits.cpuBudgetMs) this.quarantine(lane, 'cpu_budget');
  }

  private finish(r: MatchResult, ms: number): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const job = this.current;
    this.current = null;
    if (job !== null) {
      // A lane with credit left keeps the worker (pump ends its turn once the credit is spent).
      this.charge(job.lane, ms);
      this.settle(job, r);
    }
    this.pump();
  }

  private settle(job: Job, r: MatchResult): void {
    job.signal?.removeEventListener('abort', job.onAbort);
    job.resolve(r);
  }
}

/** The data plane's one matcher (one worker for every config's checks). */
export const bodyMatcher = new BodyMatcher();
