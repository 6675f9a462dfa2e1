/**
 * The client the point-in-time fork tests share: a row every ~100 ms through the source's
 * hosts.primary, the server stamping each with its statement time (`UNIX_TIMESTAMP(NOW(6))`), and
 * the client recording, for each committed row, when it was sent and when its commit was
 * acknowledged. A fork to second T must then hold every row acknowledged before T and none sent
 * at or after T.
 */
import type { Connection } from 'mysql2/promise';

export interface WrittenRow {
  id: number;
  sentMs: number;
  ackMs: number;
}

export interface RowWriter {
  /** Every committed row, in the order written. */
  readonly rows: readonly WrittenRow[];
  /** Every insert that failed (with `'reconnect'` the next id goes through a new connection). */
  readonly failures: readonly { id: number; atMs: number; error: string }[];
  /**
   * Resolves once `cond` holds; rejects after `timeoutMs`, or at once when the writer stopped on
   * an error (`onError: 'fail'`), with that error.
   */
  waitFor(cond: () => boolean, timeoutMs: number, what: string): Promise<void>;
  /** Stops after the row in flight and closes the connection; rejects with the writer's error, if any. */
  stop(): Promise<void>;
}

/**
 * Starts writing rows 1, 2, … into `table` (`id INT PRIMARY KEY, ts DECIMAL(17,6)`).
 * `onError: 'reconnect'` (the default) drops the connection on any error and goes on with the
 * next id through a new one (writes across a failover); `'fail'` stops at the first error.
 */
export function startRowWriter(o: {
  connect: () => Promise<Connection>;
  table?: string;
  everyMs?: number;
  onError?: 'reconnect' | 'fail';
}): RowWriter {
  const table = o.table ?? 'app.t';
  const everyMs = o.everyMs ?? 100;
  const rows: WrittenRow[] = [];
  const failures: { id: number; atMs: number; error: string }[] = [];
  let stop = false;
  let failure: unknown;
  const done = (async () => {
    let conn: Connection | undefined;
    for (let id = 1; !stop; id++) {
      const t0 = Date.now();
      try {
        conn ??= await o.connect();
        await conn.query(`INSERT INTO ${table} VALUES (?, UNIX_TIMESTAMP(NOW(6)))`, [id]);
        rows.push({ id, sentMs: t0, ackMs: Date.now() });
      } catch (e) {
        failures.push({ id, atMs: Date.now(), error: (e as Error).message });
        conn?.destroy();
        conn = undefined;
        if (o.onError === 'fail') {
          failure = e;
          return;
        }
      }
      await new Promise((r) => setTimeout(r, Math.max(0, everyMs - (Date.now() - t0))));
    }
    await conn?.end().catch(() => conn?.destroy());
  })();
  return {
    rows,
    failures,
    async waitFor(cond, timeoutMs, what) {
      const end = Date.now() + timeoutMs;
      for (;;) {
        if (failure !== undefined) throw failure;
        if (cond()) return;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what} (${rows.length} rows written)`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    async stop() {
      stop = true;
      await done;
      if (failure !== undefined) throw failure;
    },
  };
}

/** The second (ms, whole) in the middle of writes from `fromMs` until now. */
export function middleSecond(fromMs: number, toMs = Date.now()): number {
  return Math.floor((fromMs + toMs) / 2000) * 1000;
}

/**
 * A second (ms, whole) with rows stamped in it and in the second before, at or after
 * `notBeforeMs` and at least 2 s before `toMs`, nearest the middle of `fromMs`..`toMs`; undefined
 * if none. A fork to it then has rows on both sides of its boundary to tell apart even when the
 * writes stalled for a second or more, as they do on a host at load 20.
 */
export function boundarySecond(stampedSeconds: Iterable<number>, o: { fromMs: number; toMs: number; notBeforeMs: number }): number | undefined {
  const secs = new Set(stampedSeconds);
  const mid = (o.fromMs + o.toMs) / 2;
  const fits = [...secs].filter((s) => secs.has(s - 1) && s * 1000 >= o.notBeforeMs && s * 1000 <= o.toMs - 2000);
  fits.sort((a, b) => Math.abs(a * 1000 - mid) - Math.abs(b * 1000 - mid));
  return fits[0] === undefined ? undefined : fits[0] * 1000;
}
