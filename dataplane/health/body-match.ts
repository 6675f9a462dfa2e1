import { Worker } from 'node:worker_threads';

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

// Plain JavaScript, evaluated in the worker: the same source under tsx and from dist/. It
// reports the match's CPU time (`process.threadCpuUsage`, Node 23.9 and later) or, where that
// is missing, its wall time on this thread, which is never less.
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const { performance } = require('node:perf_hooks');
const cpu = typeof process.threadCpuUsage === 'function'
  ? () => { const u = process.threadCpuUsage(); return (u.user + u.system) / 1000; }
  : () => performance.now();
const cache = new Map();
parentPort.on('message', (m) => {
  let re = cache.get(m.key);
  if (re === undefined) {
    try { re = new RegExp(m.source, m.flags); } catch { re = null; }
    if (cache.size >= 1024) cache.clear();
    cache.set(m.key, re);
  }
  const t = cpu();
  const ok = re !== null && re.test(m.text);
  parentPort.postMessage({ ok, ms: cpu() - t });
});
`;

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
}

const SLOT_MS = 1000;

/**
 * check_body regexes are tenant input, and a JavaScript regex can backtrack for seconds
 * (`^(a+)+$` against `aaaa…b`) or for tens of milliseconds per match on a 16 KiB body
 * (`.*a.*b`). They are therefore never run on the event loop that carries traffic: one worker
 * thread runs the matches one at a time, and since every config shares it, its time is shared
 * out per config (docs/security/traffic.md):
 * - each config (with its pattern) has its own queue, bounded; the worker serves the queues by
 *   deficit round robin on measured match time, so a config whose matches take 80 ms waits
 *   about 16 turns of the others after each one, and a config with cheap matches runs many per turn;
 * - a match whose probe ended (timed out, checker stopped) leaves its queue unrun;
 * - a match still running after `timeLimitMs` is abandoned (the worker is terminated, which
 *   interrupts the regex, and a fresh one takes the queues), and a config whose matches used
 *   more than `cpuBudgetMs` within `cpuWindowMs` is quarantined: its pattern is not run for
 *   `quarantineMs` and its checks fail meanwhile. A changed pattern starts afresh.
 * Real clocks: they bound real CPU time, not scheduled behaviour.
 */
export class BodyMatcher {
  private worker: Worker | null = null;
  private ready = false;
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

  /** Stops the worker; queued matches fail. */
  close(): void {
    const w = this.worker;
    this.worker = null;
    if (w) void w.terminate();
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
        deficit: 0, inRing: false, quarantinedUntil: 0, slotAt: new Array<number>(slots).fill(-1), slotMs: new Array<number>(slots).fill(0), lastUsed: 0,
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
    if (this.current !== null || this.ring.length === 0) return;
    if (this.worker === null) this.spawn();
    // The time limit starts when the worker can run it, not while a new thread boots.
    if (!this.ready) return;
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
    const job = lane.queue.shift()!;
    this.unqueued(lane);
    this.current = job;
    this.timer = setTimeout(this.onTimeout, this.limits.timeLimitMs);
    this.worker!.postMessage({ key: `${job.flags}/${job.source}`, source: job.source, flags: job.flags, text: job.text });
  }

  private spawn(): void {
    const w = new Worker(WORKER_SOURCE, { eval: true });
    this.worker = w;
    this.ready = false;
    // Health checks must not keep a closing process alive.
    w.unref();
    w.on('online', () => {
      if (this.worker !== w) return;
      this.ready = true;
      this.pump();
    });
    w.on('message', (m: { ok: boolean; ms: number }) => {
      if (this.worker === w) this.finish(m.ok ? 'match' : 'no_match', m.ms);
    });
    w.on('error', () => this.lost(w));
    w.on('exit', () => this.lost(w));
  }

  /** The worker died on its own: the match in flight fails, a new worker takes the queues. */
  private lost(w: Worker): void {
    if (this.worker !== w) return;
    this.worker = null;
    this.ready = false;
    if (this.current !== null) this.finish('timeout', 0);
    else this.pump();
  }

  private readonly onTimeout = (): void => {
    const w = this.worker;
    this.worker = null;
    this.ready = false;
    if (w) {
      w.removeAllListeners();
      w.on('error', () => undefined);
      void w.terminate();
    }
    this.timeouts++;
    if (this.current !== null) this.quarantine(this.current.lane, 'time_limit');
    this.finish('timeout', this.limits.timeLimitMs);
  };

  private quarantine(lane: Lane, reason: keyof BodyMatcher['quarantines']): void {
    if (lane.quarantinedUntil > this.now()) return;
    lane.quarantinedUntil = this.now() + this.limits.quarantineMs;
    // What it used before does not count again once the quarantine is over.
    lane.slotAt.fill(-1);
    lane.slotMs.fill(0);
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
