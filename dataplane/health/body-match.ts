import { Worker } from 'node:worker_threads';

/** How long one check_body match may run before it counts as failed (docs/dataplane.md). */
export const MATCH_TIME_LIMIT_MS = 100;
/** A regex that ran out of time is not run again for this long; its checks fail meanwhile. */
export const QUARANTINE_MS = 60_000;

export type MatchResult = 'match' | 'no_match' | 'timeout';

// Plain JavaScript, evaluated in the worker: the same source under tsx and from dist/.
const WORKER_SOURCE = `
const { parentPort } = require('node:worker_threads');
const cache = new Map();
parentPort.on('message', (m) => {
  let re = cache.get(m.key);
  if (re === undefined) {
    try { re = new RegExp(m.source, m.flags); } catch { re = null; }
    if (cache.size >= 1024) cache.clear();
    cache.set(m.key, re);
  }
  parentPort.postMessage(re !== null && re.test(m.text));
});
`;

interface Job {
  readonly key: string;
  readonly source: string;
  readonly flags: string;
  readonly text: string;
  readonly resolve: (r: MatchResult) => void;
}

/**
 * check_body regexes are tenant input, and a JavaScript regex can backtrack for seconds
 * (`^(a+)+$` against `aaaa…b`). They are therefore never run on the event loop that carries
 * traffic: one worker thread runs the matches one at a time; a match still running after
 * MATCH_TIME_LIMIT_MS is abandoned (the worker is terminated, which interrupts the regex, and a
 * fresh one takes the queue) and the check fails. The regex is then quarantined for
 * QUARANTINE_MS, so a tenant's catastrophic pattern cannot keep the one worker busy for everyone
 * else's checks. Real timers: they bound real CPU time, not scheduled behaviour.
 */
export class BodyMatcher {
  private worker: Worker | null = null;
  private ready = false;
  private readonly queue: Job[] = [];
  private current: Job | null = null;
  private timer: NodeJS.Timeout | null = null;
  private readonly quarantined = new Map<string, number>();
  /** Matches abandoned at the time limit (a metric). */
  timeouts = 0;

  match(re: RegExp, text: string): Promise<MatchResult> {
    const key = `${re.flags}/${re.source}`;
    const until = this.quarantined.get(key);
    if (until !== undefined) {
      if (Date.now() < until) return Promise.resolve('timeout');
      this.quarantined.delete(key);
    }
    return new Promise((resolve) => {
      this.queue.push({ key, source: re.source, flags: re.flags, text, resolve });
      this.pump();
    });
  }

  /** Stops the worker; queued matches fail. */
  close(): void {
    const w = this.worker;
    this.worker = null;
    if (w) void w.terminate();
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const jobs = this.current ? [this.current, ...this.queue] : [...this.queue];
    this.current = null;
    this.queue.length = 0;
    for (const j of jobs) j.resolve('timeout');
  }

  private pump(): void {
    if (this.current !== null || this.queue.length === 0) return;
    if (this.worker === null) this.spawn();
    // The time limit starts when the worker can run it, not while a new thread boots.
    if (!this.ready) return;
    const job = this.queue.shift()!;
    this.current = job;
    this.timer = setTimeout(this.onTimeout, MATCH_TIME_LIMIT_MS);
    this.worker!.postMessage({ key: job.key, source: job.source, flags: job.flags, text: job.text });
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
    w.on('message', (ok: boolean) => {
      if (this.worker === w) this.finish(ok ? 'match' : 'no_match');
    });
    w.on('error', () => this.lost(w));
    w.on('exit', () => this.lost(w));
  }

  /** The worker died on its own: the match in flight fails, a new worker takes the queue. */
  private lost(w: Worker): void {
    if (this.worker !== w) return;
    this.worker = null;
    this.ready = false;
    if (this.current !== null) this.finish('timeout');
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
    if (this.current !== null) this.quarantined.set(this.current.key, Date.now() + QUARANTINE_MS);
    this.finish('timeout');
  };

  private finish(r: MatchResult): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const job = this.current;
    this.current = null;
    job?.resolve(r);
    this.pump();
  }
}

/** The data plane's one matcher (one worker for every config's checks). */
export const bodyMatcher = new BodyMatcher();
