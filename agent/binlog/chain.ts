/**
 * Binlog chains (docs/agent.md §6, "Binlog archive and forks"), pure: GTID positions compared per
 * replication domain, which archived segments follow a backup without a gap, the oldest instant
 * that can be restored, and what retention lets go.
 */

/** A GTID position `d-s-n[,d-s-n...]` as domain -> sequence number ('' = nothing yet). */
export function parseGtidPos(pos: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const part of pos.split(',').map((x) => x.trim()).filter(Boolean)) {
    const [d, , n] = part.split('-').map(Number);
    if (d === undefined || n === undefined || Number.isNaN(d) || Number.isNaN(n)) throw new Error(`bad GTID position ${pos}`);
    out.set(d, Math.max(out.get(d) ?? 0, n));
  }
  return out;
}

/** Whether position a has applied nothing that b has not (a <= b in every domain). */
export function gtidLe(a: string, b: string): boolean {
  const pb = parseGtidPos(b);
  for (const [d, n] of parseGtidPos(a)) if (n > (pb.get(d) ?? 0)) return false;
  return true;
}

/** One archived binlog file: the transactions after `gtidStart` up to `gtidEnd`. */
export interface SegmentInfo {
  seq: number;
  gtidStart: string;
  gtidEnd: string;
  /** When the agent closed the file (FLUSH BINARY LOGS): every event in it is older. */
  closedMs: number;
}

/** A backup a chain can start from: its snapshot position and when it had surely been taken. */
export interface BaseInfo {
  id: number;
  snapshotGtid: string;
  finishedMs: number;
}

/**
 * The segments to replay after a backup at `from`, in order, up to the first closed at or after
 * `untilMs` (or every later one when `untilMs` is undefined). Undefined when a gap breaks the
 * chain: a segment must start at or before the position reached so far, and end after it.
 */
export function chainFrom(from: string, segments: readonly SegmentInfo[], untilMs?: number): SegmentInfo[] | undefined {
  const ordered = [...segments].sort((a, b) => a.seq - b.seq);
  const out: SegmentInfo[] = [];
  let pos = from;
  for (const s of ordered) {
    if (gtidLe(s.gtidEnd, pos)) continue; // nothing new after pos
    if (!gtidLe(s.gtidStart, pos)) return undefined; // transactions between pos and its start are missing
    out.push(s);
    pos = s.gtidEnd;
    if (untilMs !== undefined && s.closedMs >= untilMs) return out;
  }
  // A chain that does not reach `untilMs` cannot restore that instant.
  return untilMs === undefined ? out : undefined;
}

/** The archive's end: the position and time the newest segment reaches (undefined when empty). */
export function archiveEnd(segments: readonly SegmentInfo[]): SegmentInfo | undefined {
  return [...segments].sort((a, b) => a.seq - b.seq).at(-1);
}

/**
 * The oldest instant that can truly be restored: the oldest base followed by an unbroken chain
 * to the archive's end, rounded up to a whole second (a fork to second T holds what was stamped
 * before T, so it needs a backup finished by T). Undefined when no base has such a chain.
 */
export function oldestRestorable(bases: readonly BaseInfo[], segments: readonly SegmentInfo[]): number | undefined {
  const end = archiveEnd(segments);
  for (const b of [...bases].sort((x, y) => x.finishedMs - y.finishedMs)) {
    if (end && !gtidLe(end.gtidEnd, b.snapshotGtid) && !chainFrom(b.snapshotGtid, segments)) continue;
    return Math.ceil(b.finishedMs / 1000) * 1000;
  }
  return undefined;
}

/**
 * The newest base a fork at `stopMs` (exclusive end: a fork to second T stops at `T`, so the base
 * must have finished by then and its snapshot holds nothing stamped T or later) can start from, and
 * the segments to replay; undefined when none can reach that instant. `complete` says the archive
 * is known to hold every event before `stopMs` (a round flushed after it and found nothing more to
 * close): then a gapless chain to the archive's end is enough, even when no segment was closed
 * after `stopMs` (nothing was written between the last one and that instant).
 */
export function planRestore(bases: readonly BaseInfo[], segments: readonly SegmentInfo[], stopMs: number, complete = false): { base: BaseInfo; segments: SegmentInfo[] } | undefined {
  for (const b of [...bases].filter((x) => x.finishedMs <= stopMs).sort((x, y) => y.finishedMs - x.finishedMs)) {
    const chain = chainFrom(b.snapshotGtid, segments, stopMs) ?? (complete ? chainFrom(b.snapshotGtid, segments) : undefined);
    if (chain) return { base: b, segments: chain };
  }
  return undefined;
}

/**
 * What retention lets go at `nowMs`: every instant after `nowMs - retentionMs` must stay
 * restorable, so the newest base finished by then is kept with every segment after it; older
 * hidden bases and the segments before it go. Customer backups are never removed here.
 */
export function prune(bases: readonly (BaseInfo & { hidden: boolean })[], segments: readonly SegmentInfo[], nowMs: number, retentionMs: number): { bases: number[]; segments: number[] } {
  const horizon = nowMs - retentionMs;
  const keep = [...bases].filter((b) => b.finishedMs <= horizon && chainFrom(b.snapshotGtid, segments) !== undefined)
    .sort((x, y) => y.finishedMs - x.finishedMs)[0];
  if (!keep) return { bases: [], segments: [] };
  return {
    bases: bases.filter((b) => b.hidden && b.finishedMs < keep.finishedMs).map((b) => b.id),
    segments: segments.filter((s) => gtidLe(s.gtidEnd, keep.snapshotGtid)).map((s) => s.seq),
  };
}
