import { wireTime } from '../../../lib/clock.js';
import type { ErrorCollector } from '../../../lib/errors.js';
import type { Body } from '../validation/fields.js';
import type { DatabaseFork } from './model.js';

/**
 * The `fork` of a create request (docs/databases.md, "Fork to a point in time"), kept apart from
 * the other create rules because clients send it in more than one shape (docs/compatibility.md,
 * "Managed Databases: today's clients beside 4.176").
 */

/** The texts a fork can be refused with; part of `databaseReasons` (validation.ts). */
export const forkReasons = {
  forkObject: 'fork must be an object with source and restore_time',
  forkSource: 'fork.source must be the id of a MySQL database you can read',
  forkSourceStatus: (status: string) => `fork.source must be active, backing_up, degraded or failed to be forked; it is ${status}`,
  forkEngine: (engine: string) => `A fork must use its source's engine ${engine}`,
  forkTime: 'fork.restore_time must be a UTC date and time such as 2026-01-02T03:04:05',
  forkNoHistory: 'fork.source has no point in time to restore yet (its oldest_restore_time is null)',
  forkTimeRange: (oldest: string, now: string) => `fork.restore_time must be from ${oldest} (oldest_restore_time) to ${now}`,
} as const;

const R = forkReasons;

/** A fork's source as validation sees it: undefined when missing or not readable by the caller. */
export interface ForkSourceView {
  status: string;
  engineId: string;
  oldestRestoreMs: number | null;
}

/** What fork validation needs from the caller's view of the store. */
export interface ForkLookups {
  /** A fork's source, undefined when it does not exist or the caller cannot read it. */
  forkSource?(id: number): ForkSourceView | undefined;
  /** Now, from the injected clock (the upper bound of a fork's restore_time). */
  nowMs?: number;
}

/** `restore_time` as clients send it: ISO 8601, seconds or finer, UTC unless a zone is given. */
export function parseRestoreTime(v: unknown): number | undefined {
  if (typeof v !== 'string') return undefined;
  const m = /^(\d{4}-\d{2}-\d{2})[T ](\d{2}:\d{2}:\d{2})(\.\d+)?(Z|[+-]\d{2}:\d{2})?$/.exec(v.trim());
  if (!m) return undefined;
  const ms = Date.parse(`${m[1]}T${m[2]}${m[3] ?? ''}${m[4] ?? 'Z'}`);
  return Number.isNaN(ms) ? undefined : Math.floor(ms / 1000) * 1000;
}

/**
 * The restore time a client sent, or undefined for "the latest second". linodego, and so the
 * Terraform provider, writes its restore time under the key `-` (the name its struct tag gives
 * the field), so `-` counts when `restore_time` is absent; null in either means not sent.
 */
function sentRestoreTime(f: Body): unknown {
  if (f.restore_time !== undefined && f.restore_time !== null) return f.restore_time;
  return f['-'] ?? undefined;
}

/**
 * A source the caller can read, in a state that can be forked, on the engine asked for, and a
 * second between its oldest restorable instant and now. No restore time means now, the latest
 * second the source can be forked at, and `throughSecond`: a fork holds what was stamped before its
 * restore second (docs/databases.md), so without it "now" would leave out what was committed earlier
 * in the current second, right before the request (a restore just finished, the last rows written).
 */
export function validateFork(errs: ErrorCollector, fork: unknown, engineId: string | undefined, look: ForkLookups): DatabaseFork | undefined {
  if (typeof fork !== 'object' || fork === null || Array.isArray(fork)) return void errs.add('fork', R.forkObject);
  const f = fork as Body;
  const id = f.source;
  const src = Number.isSafeInteger(id) && (id as number) > 0 ? look.forkSource?.(id as number) : undefined;
  const sent = sentRestoreTime(f);
  const at = sent === undefined ? 'latest' : parseRestoreTime(sent);
  if (at === undefined) errs.add('fork.restore_time', R.forkTime);
  if (!src) return void errs.add('fork.source', R.forkSource);
  // A snapshot in progress leaves the source's backups and archive as they were: a source whose
  // agent died during one stays backing_up, and a fork (on another agent of its store) is then
  // the way to its data.
  if (!['active', 'backing_up', 'degraded', 'failed'].includes(src.status)) return void errs.add('fork.source', R.forkSourceStatus(src.status));
  if (engineId !== undefined && engineId !== src.engineId) errs.add('engine', R.forkEngine(src.engineId));
  if (at === undefined) return undefined;
  if (src.oldestRestoreMs === null) return void errs.add('fork.source', R.forkNoHistory);
  const now = Math.floor((look.nowMs ?? Date.now()) / 1000) * 1000;
  const ms = at === 'latest' ? now : at;
  if (ms < src.oldestRestoreMs || ms > now) return void errs.add('fork.restore_time', R.forkTimeRange(wireTime(src.oldestRestoreMs), wireTime(now)));
  return at === 'latest' ? { source: id as number, restoreTimeMs: ms, throughSecond: true } : { source: id as number, restoreTimeMs: ms };
}

/** What a fork takes from its source when the request leaves it out. */
export interface ForkDefaultsSource {
  label: string;
  engineId: string;
  type: string;
  clusterSize: number;
  replicationType: string;
}

/**
 * Cloud Manager forks with a body of only `{fork, region[, private_network]}`: the engine, type,
 * cluster size and replication type come from the source, as on the real service, and the label
 * is `<source label>-fork` (the source label shortened to fit 32 characters, and `-fork-2`,
 * `-fork-3`, ... when taken). Keys the request does send are kept and validated as sent.
 */
export function withForkDefaults(body: Body, src: ForkDefaultsSource, labelTaken: (label: string) => boolean): Body {
  const out: Body = { ...body };
  const absent = (k: string) => out[k] === undefined || out[k] === null;
  if (absent('engine')) out.engine = src.engineId;
  if (absent('type')) out.type = src.type;
  if (absent('cluster_size')) {
    out.cluster_size = src.clusterSize;
    if (absent('replication_type')) out.replication_type = src.replicationType;
  }
  if (absent('label')) {
    for (let n = 1; n < 1000; n++) {
      const suffix = n === 1 ? '-fork' : `-fork-${n}`;
      const label = `${src.label.slice(0, 32 - suffix.length)}${suffix}`;
      if (!labelTaken(label)) {
        out.label = label;
        break;
      }
    }
  }
  return out;
}
