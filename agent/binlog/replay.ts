import { PassThrough, Transform } from 'node:stream';
import { pipeline } from 'node:stream/promises';
import { crashPoint } from '../../lib/crash-point.js';
import type { Logger } from '../../lib/logger.js';
import { decryptStreamFor } from '../backup/backup-crypto.js';
import { decompressor, storedFormat } from '../backup/store-codec.js';
import type { BackupManifest, BackupStorage } from '../backup/backup-storage.js';
import { loadBackup } from '../backup/load-backup.js';
import { isPhysical } from '../backup/physical-backup.js';
import type { DatabaseController } from '../database/controller.js';
import { withAdmin } from '../mysql/admin.js';
import { clientError, SQL_CLIENT } from '../mysql/customer-data.js';
import { gtidCurrentPos, waitForGtid } from '../mysql/replication.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import type { ArchivedDatabase, Archiver } from './archiver.js';
import { basesOf } from './archiver.js';
import { archiveEnd, planRestore } from './chain.js';
import { seedPhysical } from './physical-seed.js';
import type { SegmentManifest, SegmentStorage } from './segment-storage.js';
import { applyState, updateState } from '../database/state.js';
import { BASE_IDS } from '../backup/backup-service.js';

export type ForkTarget = Pick<DatabaseController, 'id' | 'state' | 'desired' | 'adminTarget' | 'nodeName' | 'save'>;
export type ForkSource = ArchivedDatabase;

export interface ReplayDeps {
  runtime: ContainerRuntime;
  storage: BackupStorage;
  segments: SegmentStorage;
  archiver: Archiver;
  backups: { refresh(dbId: number): Promise<BackupManifest[]>; verify(m: BackupManifest): Promise<void> };
  logger: Logger;
}

/** `YYYY-MM-DD HH:MM:SS` in UTC, as mariadb-binlog reads --stop-datetime under TZ=UTC. */
export function binlogDatetime(ms: number): string {
  return new Date(ms).toISOString().slice(0, 19).replace('T', ' ');
}

/** Account statements on linroot: the fork's linroot is its own (desired state), never the source's. */
const LINROOT_DCL = /^\s*(create|alter|drop|rename)\s+user\b|^\s*(grant|revoke)\b|^\s*set\s+password\b/i;

/**
 * Filters mariadb-binlog's SQL for the fork: the source's GTIDs and server id are dropped (the
 * fork's servers give the replayed transactions their own, in order, as gtid_strict_mode wants),
 * and account statements naming linroot are left out (the agent manages the fork's linroot).
 */
export function replayFilter(): Transform {
  let rest = '';
  let skipping = false;
  const session = /^\/\*M?!100001 SET @@session\.(gtid_domain_id|gtid_seq_no|server_id)=/i;
  const keep = (line: string): boolean => {
    if (skipping) {
      if (line.trimEnd().endsWith('/*!*/;')) skipping = false;
      return false;
    }
    if (session.test(line)) return false;
    if (LINROOT_DCL.test(line) && /linroot/i.test(line)) {
      skipping = !line.trimEnd().endsWith('/*!*/;');
      return false;
    }
    return true;
  };
  return new Transform({
    transform(chunk: Buffer, _e, cb) {
      const lines = (rest + chunk.toString('latin1')).split('\n');
      rest = lines.pop()!;
      cb(null, Buffer.from(lines.filter(keep).map((l) => `${l}\n`).join(''), 'latin1'));
    },
    flush(cb) {
      cb(null, rest && keep(rest) ? Buffer.from(rest, 'latin1') : Buffer.alloc(0));
    },
  });
}

/**
 * Builds a fork's data on its primary (docs/agent.md §6, "Binlog archive and forks"): the source's newest backup
 * finished by the start of the restore second T, loaded as a restore loads one, then every
 * archived binlog after that backup replayed with `mariadb-binlog --start-position=<GTID>
 * --stop-datetime=T` (UTC), which stops at the first event stamped T or later, so exactly the
 * transactions the binlog stamps with a second before T are applied: a fork to the second a bad
 * DROP ran does not hold the DROP. The fork's replicas follow through replication. The source
 * keeps running: only a FLUSH BINARY LOGS touches it.
 */
/**
 * The exclusive end a fork replays to: the restore second it was given, or the end of that second
 * when the fork was asked for with no restore time (the request came within the second, so what
 * was committed earlier in it belongs in the fork; the archive is waited for up to there).
 */
export function forkStopMs(desired: { forkRestoreMs?: number | string | { toString(): string }; forkThroughSecond?: boolean } | undefined): number {
  const ms = Number(desired?.forkRestoreMs ?? 0);
  return desired?.forkThroughSecond === true ? ms + 1000 : ms;
}

/**
 * How long a fork from the shared store waits for the source's agent to archive past the restore
 * second (its archive round runs every BINLOG_ARCHIVE_MS at most) before it fails.
 */
export const STORE_ARCHIVE_WAIT_MS = 5 * 60_000;

/**
 * A fork's source run by another agent that shares this agent's object store: its objects are
 * read by its id, with the key the control plane sent for it (DesiredDatabase.fork_source_key).
 */
export interface StoredSource {
  id: number;
  backupKey: string;
  /**
   * A recovery, not a fork (DesiredDatabase.recover_from_store): the source is this database
   * itself, whose host was lost. It is rebuilt up to the archive's last event, keeps the key, and
   * its archive continues from where the lost host left it (see continueArchive).
   */
  recover?: boolean;
  /** Tells the database's events (the recovery and the instant it reached). */
  emit?: (action: string, message: string, status?: string) => void;
  /** How long to wait for the source's archive to pass the restore second (STORE_ARCHIVE_WAIT_MS). */
  waitMs?: number;
  pollMs?: number;
}

export async function seedFork(d: ReplayDeps, fork: ForkTarget, source: ForkSource | undefined, restoreMs: number, stored?: StoredSource): Promise<void> {
  const sourceId = Number(fork.desired?.forkSource ?? 0);
  if (!source?.state?.provisioned) {
    if (stored && stored.id === sourceId) return seedFromStore(d, fork, stored, restoreMs);
    throw new Error(`the fork's source database ${sourceId} is not run by this agent`);
  }
  const log = d.logger.child({ component: 'fork', database: fork.id });
  // The source's key as the seed starts: a delete of the source while the fork reads (its objects
  // kept by the fork's read lease) clears its state, not what the fork needs to read them.
  const keyed = { id: source.id, state: { backupKey: source.state.backupKey } };
  // T is an exclusive end: nothing stamped T or later, and a base whose snapshot is before T.
  const stopMs = restoreMs;
  const started = Date.now();
  // A fork through the current second (no restore time) starts its archive round once that second
  // is over, so the round covers it: at most one second's wait.
  if (stopMs > started) await new Promise((r) => setTimeout(r, Math.min(stopMs - started, 1000)));
  // Close and archive the source's current binlog, so the archive holds everything up to now.
  if (d.archiver.coveredUntil(source.id) < stopMs) {
    try {
      await d.archiver.archive(source);
    } catch (err) {
      log.warn({ err, source: source.id }, 'the source could not be archived now; using what is archived');
    }
  }
  const segments = await d.segments.list(source.id);
  const end = archiveEnd(segments);
  if (Math.max(d.archiver.coveredUntil(source.id), end?.closedMs ?? 0) < stopMs) {
    throw new Error(`database ${source.id} has no archived binlogs up to ${binlogDatetime(restoreMs)} UTC yet`);
  }
  const manifests = await d.backups.refresh(source.id);
  // A physical base loads in seconds whatever the data size, and the archive keeps one recent
  // (archiver.ts), so it is preferred to a newer logical backup; a logical one is used only when
  // no physical base reaches the second (docs/agent.md §6, "Binlog archive and forks").
  const bases = basesOf(manifests);
  // mariadb-backup prepares only copies of its own series (10.11 vs 11.8), and the fork runs the
  // source's engine: a copy from before a version upgrade is passed over.
  const physical = bases.filter((b) => {
    const m = manifests.find((x) => x.id === b.id)!;
    return isPhysical(m) && sameSeries(m.engineVersion, fork.state!.running.version);
  });
  const complete = d.archiver.coveredUntil(source.id) >= stopMs;
  const plan = planRestore(physical, segments, stopMs, complete)
    ?? planRestore(bases.filter((b) => !isPhysical(manifests.find((m) => m.id === b.id)!)), segments, stopMs, complete);
  if (!plan) throw new Error(`database ${source.id} has no backup with an unbroken binlog chain up to ${binlogDatetime(restoreMs)} UTC`);
  const base = manifests.find((m) => m.id === plan.base.id)!;
  const planned = Date.now();
  await d.backups.verify(base);
  const steps: Record<string, number> = { archiveMs: planned - started, verifyMs: Date.now() - planned };
  const s = fork.state!;
  const p = s.primary;
  const kind = isPhysical(base) ? 'physical' : 'logical';
  if (kind === 'physical') {
    Object.assign(steps, await seedPhysical({ runtime: d.runtime, storage: d.storage }, fork, { id: source.id, backupKey: keyed.state.backupKey }, base));
  } else {
    // The backup is the source's (its storage, its key); it is loaded into the fork's primary.
    await loadBackup({ runtime: d.runtime, storage: d.storage }, {
      id: source.id, adminTarget: (k) => fork.adminTarget(k), nodeName: (k) => fork.nodeName(k),
      state: { ...s, backupKey: keyed.state.backupKey },
    }, p, base);
  }
  applyState(fork, { forkBase: { backupId: base.id, kind } });
  log.info({ source: source.id, backup: base.id, kind, bytes: base.sizeBytes, ms: Date.now() - started, steps }, 'fork: base loaded');
  let pos = plan.base.snapshotGtid;
  for (const seg of segments.filter((x) => plan.segments.some((y) => y.seq === x.seq))) {
    await replaySegment(d, fork, keyed, seg, pos, stopMs);
    pos = seg.gtidEnd;
    // Part of the replay applied, the fork not provisioned yet.
    crashPoint('fork-replayed-segment');
  }
  await replicasCatchUp(fork);
  log.info({ source: source.id, backup: base.id, kind, segments: plan.segments.length, ms: Date.now() - started }, 'fork: binlogs replayed');
}

/**
 * A fork built from the shared object store on an agent that does not run the source
 * (docs/databases.md, "Fork to a point in time"): the source's newest backup finished by T
 * and the archived binlogs after it, listed from the store by the source's id, decrypted with the
 * source's key, replayed with the same exclusive end T as on the source's agent. The source's
 * current binlog cannot be flushed from here: the fork waits for the source's agent to archive a
 * segment closed at T or later. A physical base of the fork's engine series is preferred, as on
 * the source's agent (its accounts are reset offline, physical-seed.ts); the logical path is taken
 * only when no such base, finished by T, has an unbroken binlog chain up to T (the source ran
 * another series when its bases were taken, or its archive broke after the last one).
 */
async function seedFromStore(d: ReplayDeps, fork: ForkTarget, source: StoredSource, stopMs: number): Promise<void> {
  const log = d.logger.child({ component: 'fork', database: fork.id });
  const started = Date.now();
  const deadline = started + (source.waitMs ?? STORE_ARCHIVE_WAIT_MS);
  let manifests: BackupManifest[];
  let segments: SegmentManifest[];
  let plan: ReturnType<typeof planRestore>;
  // The key first: anything this agent writes for the database from now on (its archive, its
  // backups) must be readable with the one its objects in the store already use.
  if (source.recover) await updateState(fork, { backupKey: source.backupKey });
  for (;;) {
    segments = await d.segments.list(source.id);
    manifests = await d.backups.refresh(source.id);
    const all = basesOf(manifests);
    const logical = all.filter((b) => !isPhysical(manifests.find((m) => m.id === b.id)!));
    // Physical bases of the fork's engine series are preferred, as on the source's agent: the
    // copy's accounts are reset offline (physical-seed.ts), so nothing of the source's is needed.
    const physical = all.filter((b) => {
      const m = manifests.find((x) => x.id === b.id)!;
      return isPhysical(m) && sameSeries(m.engineVersion, fork.state!.running.version);
    });
    if (source.recover) {
      // The lost host archives nothing more: what the store holds now is all there is, and every
      // event of the last segment is older than its close, so the replay ends after that second.
      const end = archiveEnd(segments);
      stopMs = recoveryStopMs(end?.closedMs ?? Math.max(0, ...all.map((b) => b.finishedMs)));
      // A new database has a physical base from its first archive round, long before its first
      // auto backup.
      plan = planRestore(physical, segments, stopMs, true) ?? planRestore(logical, segments, stopMs, true);
      if (plan) break;
      throw new Error(`database ${source.id} has no backup in the object store with an unbroken binlog chain after it; it cannot be recovered`);
    }
    plan = planRestore(physical, segments, stopMs) ?? planRestore(logical, segments, stopMs);
    if (plan) break;
    if (Date.now() >= deadline) {
      throw new Error(`database ${source.id} has no backup in the store with an unbroken binlog chain up to ${binlogDatetime(stopMs)} UTC`);
    }
    await new Promise((r) => setTimeout(r, source.pollMs ?? 2000));
  }
  const base = manifests.find((m) => m.id === plan.base.id)!;
  const planned = Date.now();
  const kind = isPhysical(base) ? 'physical' : 'logical';
  // A physical base's checksum is checked by seedPhysical while it is unpacked (one read).
  if (kind !== 'physical') await d.backups.verify(base);
  const steps: Record<string, number> = { waitMs: planned - started, verifyMs: Date.now() - planned };
  const s = fork.state!;
  if (kind === 'physical') {
    Object.assign(steps, await seedPhysical({ runtime: d.runtime, storage: d.storage }, fork, { id: source.id, backupKey: source.backupKey }, base));
  } else {
    await loadBackup({ runtime: d.runtime, storage: d.storage }, {
      id: source.id, adminTarget: (k) => fork.adminTarget(k), nodeName: (k) => fork.nodeName(k),
      state: { ...s, backupKey: source.backupKey },
    }, s.primary, base);
  }
  applyState(fork, { forkBase: { backupId: base.id, kind } });
  log.info({ source: source.id, backup: base.id, kind, bytes: base.sizeBytes, ms: Date.now() - started, steps, fromStore: true }, 'fork: base loaded');
  const keyed = { id: source.id, state: { backupKey: source.backupKey } };
  let pos = plan.base.snapshotGtid;
  for (const seg of segments.filter((x) => plan.segments.some((y) => y.seq === x.seq))) {
    await replaySegment(d, fork, keyed, seg, pos, stopMs);
    pos = seg.gtidEnd;
    crashPoint('fork-replayed-segment');
  }
  await replicasCatchUp(fork);
  log.info({ source: source.id, backup: base.id, kind, segments: plan.segments.length, ms: Date.now() - started, fromStore: true }, 'fork: binlogs replayed');
  if (source.recover) await continueArchive(fork, manifests, segments, plan, Date.now() - started, source.emit);
}

/** Whether two engine versions are of one series (10.11 vs 11.8): mariadb-backup prepares only its own. */
export function sameSeries(a: string, b: string): boolean {
  const series = (v: string) => v.split('.').slice(0, 2).join('.');
  return series(a) === series(b);
}

/**
 * The exclusive end a recovery replays to: the whole second after the archive's last close
 * (mariadb-binlog stops on whole seconds, and every archived event is older than that close).
 */
export function recoveryStopMs(lastClosedMs: number): number {
  return Math.floor(lastClosedMs / 1000) * 1000 + 1000;
}

/**
 * After a recovery the database is the one the store's objects belong to, so its archive and
 * backups go on in the same chain: its binlog restarts at the archive's end position (the
 * replayed transactions were given this server's GTIDs, which the archive must not see again),
 * and its backup and base ids continue after the stored ones. Then the event saying to which
 * instant it was recovered: everything committed before the archive's last close.
 */
async function continueArchive(
  db: ForkTarget, manifests: BackupManifest[], segments: SegmentManifest[], plan: NonNullable<ReturnType<typeof planRestore>>, ms: number,
  emit?: StoredSource['emit'],
): Promise<void> {
  const s = db.state!;
  const end = archiveEnd(segments);
  const pos = plan.segments.at(-1)?.gtidEnd ?? plan.base.snapshotGtid;
  if (s.addresses.length === 1 && pos) {
    await withAdmin(await db.adminTarget(s.primary), async (x) => {
      await x.query('RESET MASTER');
      await x.query('SET GLOBAL gtid_binlog_state = ?', [pos]);
    });
  }
  const ids = manifests.map((m) => m.id);
  await updateState(db, {
    nextBackupId: Math.max(s.nextBackupId, ...ids.filter((i) => i < BASE_IDS).map((i) => i + 1)),
    nextBaseId: Math.max(s.nextBaseId ?? 1, ...ids.filter((i) => i >= BASE_IDS).map((i) => i - BASE_IDS + 1)),
  });
  const at = end?.closedMs ?? plan.base.finishedMs;
  const message = `recovered from the object store to ${new Date(at).toISOString()} (recovery point: every transaction committed before then; backup ${plan.base.id} plus ${plan.segments.length} archived binlog segments, in ${Math.round(ms / 1000)} s); its binlog continues from GTID position ${pos || '(none)'}`;
  emit?.('database_update', message, 'notification');
}

async function replicasCatchUp(fork: ForkTarget): Promise<void> {
  const s = fork.state!;
  const at = await withAdmin(await fork.adminTarget(s.primary), (x) => gtidCurrentPos(x));
  for (let k = 1; k <= s.addresses.length; k++) {
    if (k === s.primary) continue;
    if (!(await withAdmin(await fork.adminTarget(k), (x) => waitForGtid(x, at, 600)))) throw new Error(`node ${k} of the fork did not catch up with the replayed data`);
  }
}

async function replaySegment(d: ReplayDeps, fork: ForkTarget, source: { id: number; state?: { backupKey?: string } }, seg: SegmentManifest, after: string, stopMs: number): Promise<void> {
  const s = fork.state!;
  const node = fork.nodeName(s.primary);
  // zstd since segments are written so; gzip for those archived before.
  const f = storedFormat(seg.format);
  if (f?.kind !== 'binlog') throw new Error(`binlog segment ${seg.seq} of database ${source.id} has an unknown format ${String(seg.format)}`);
  let decrypt: Transform | undefined;
  if (f.encrypted) {
    const key = source.state!.backupKey;
    try {
      if (!key) throw new Error('no backup key');
      decrypt = decryptStreamFor(seg.encryption, key);
    } catch (err) {
      throw new Error(`binlog segment ${seg.seq} of database ${source.id} cannot be decrypted (${(err as Error).message})`);
    }
  }
  const decompress = decompressor(f.codec);
  const raw = new PassThrough();
  const sql = new PassThrough();
  const src = d.segments.reader(source.id, seg.seq, seg.file);
  const feeding = (decrypt ? pipeline(src, decrypt, decompress, raw) : pipeline(src, decompress, raw)).then(() => undefined, (e: Error) => e);
  const filtered = replayFilter();
  const filtering = pipeline(filtered, sql).then(() => undefined, (e: Error) => e);
  const args = ['mariadb-binlog', ...(after ? [`--start-position=${after}`] : []), `--stop-datetime=${binlogDatetime(stopMs)}`, '-'];
  const [dec, load] = await Promise.all([
    d.runtime.exec(node, args, { stdin: raw, stdout: filtered, env: { TZ: 'UTC' } }),
    d.runtime.exec(node, [...SQL_CLIENT, '--user=root', '--binary-mode'], { stdin: sql, env: { MYSQL_PWD: s.adminPassword } }),
  ]);
  raw.destroy();
  const fed = await feeding;
  await filtering;
  if (dec.exitCode !== 0) throw new Error(`reading binlog segment ${seg.seq} failed: ${clientError(dec.stderr)}`);
  if (load.exitCode !== 0) throw new Error(`replaying binlog segment ${seg.seq} failed: ${clientError(load.stderr)}`);
  if (fed instanceof Error && !/premature close/i.test(fed.message)) throw new Error(`reading binlog segment ${seg.seq} failed: ${fed.message}`);
}
