import { stat, type FileHandle } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { pipeline } from 'node:stream/promises';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { BackupManifest } from '../backup/backup-storage.js';
import type { BackupDatabase } from '../backup/backup-service.js';
import { BACKUP_CIPHER, FRAME_BYTES } from '../backup/backup-crypto.js';
import { formatOf, STORE_ZSTD_LEVEL } from '../backup/store-codec.js';
import { databaseKey } from '../backup/backup-key.js';
import { sealedWriter } from '../backup/sealed-writer.js';
import { isPhysical } from '../backup/physical-backup.js';
import { leased, type ReadLeases } from '../backup/read-lease.js';
import type { DatabaseController } from '../database/controller.js';
import { updateState } from '../database/state.js';
import { q, serverSocket, withAdmin } from '../mysql/admin.js';
import { clientError } from '../mysql/customer-data.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { ensureDir, openOwnedFile, removeTree } from '../runtime/no-follow.js';
import { archiveEnd, gtidLe, oldestRestorable, prune, type BaseInfo } from './chain.js';
import type { SegmentManifest, SegmentStorage } from './segment-storage.js';

/** The backups' retention, and the binlogs' unless engine_config says otherwise. */
export const DEFAULT_RETENTION_MS = 7 * 24 * 3600_000;

/**
 * Binlog bytes archived after the newest physical base that make a round take a new one: a
 * fork replays at most about this much (seconds), whatever the data size.
 */
export const PHYSICAL_REFRESH_BYTES = 64 * 1024 * 1024;
/** Hidden physical bases kept beyond what restorability needs: the newest few. */
const PHYSICAL_KEEP = 2;
/**
 * After a physical base could not be taken, the rounds wait this long before trying again,
 * doubling with each failure in a row up to PHYSICAL_RETRY_MAX_MS: a copy that failed under a
 * burst of writes usually succeeds a few minutes later, and a host whose copies keep failing is
 * not loaded with a large copy every round.
 */
const PHYSICAL_RETRY_MS = 2 * 60_000;
const PHYSICAL_RETRY_MAX_MS = 3600_000;

/**
 * Binlog bytes of segment x written after base b: none when it ends at or before the base, the
 * part past the base's offset for the file the base was taken in the middle of (whole when the
 * base did not record it), all of a later one.
 */
export function bytesAfter(x: SegmentManifest, b: Pick<BackupManifest, 'snapshotGtid' | 'binlog'>): number {
  const raw = x.rawBytes ?? x.sizeBytes;
  if (gtidLe(x.gtidEnd, b.snapshotGtid ?? '')) return 0;
  if (!gtidLe(x.gtidStart, b.snapshotGtid ?? '')) return raw;
  return b.binlog && b.binlog.file === x.sourceFile ? Math.max(0, raw - b.binlog.pos) : raw;
}

/** A round asked for rather than timed (archive(c, o)). */
export interface RoundOptions {
  /**
   * Take a physical base at the end of the round whatever binlog followed the newest one (a
   * fork or a bench that wants one now, RunningAgent.archiveNow); its failure fails the round.
   */
  physicalBase?: boolean;
}

/** What archiving uses of a database. */
export type ArchivedDatabase = BackupDatabase & Pick<DatabaseController, 'busy' | 'deleted' | 'nodeIndexes'>;

export interface ArchiverDeps {
  runtime: ContainerRuntime;
  segments: SegmentStorage;
  backups: {
    refresh(dbId: number): Promise<BackupManifest[]>;
    takeBase(c: BackupDatabase, o?: { physicalOnly?: boolean; signal?: AbortSignal }): Promise<BackupManifest>;
    /** Removes a hidden base (the customer-facing remove refuses those). */
    removeBase(dbId: number, id: number): Promise<void>;
  };
  clock: Clock;
  logger: Logger;
  /** Every database's segments are encrypted (the store is off the host), not only `encrypted` ones'. */
  encryptAll?: boolean;
  /** Forks' read leases on the database's objects, which retention honours (read-lease.ts). */
  leases?: ReadLeases;
}

/** Backups a chain may start from: every backup with a snapshot position (not a safety copy). */
export function basesOf(list: readonly BackupManifest[]): (BaseInfo & { hidden: boolean })[] {
  return list.filter((m) => m.type !== 'pre-restore' && m.snapshotGtid !== undefined)
    .map((m) => ({ id: m.id, snapshotGtid: m.snapshotGtid!, finishedMs: m.finishedMs, hidden: m.type === 'base' }));
}

/**
 * Binlog archiving (docs/agent.md §6, "Binlog archive and forks"): each round closes the primary's current
 * binlog (FLUSH BINARY LOGS), copies every closed file the archive lacks through the server
 * (`mariadb-binlog --read-from-remote-server --raw`, so an `encrypted` database's files arrive
 * readable), stores it gzip'd, encrypted like the database's backups, with its SHA-256, and
 * prunes what the retention no longer needs. A chain starts at a backup; when none exists, or
 * the primary no longer has the files that continue the chain (a failover onto a node rebuilt
 * from a dump, a purge), a hidden base backup starts a new one.
 */
/**
 * Whether archive rounds may run while the database's action `busy` (undefined: none) runs. Not
 * while an action restarts, replaces or removes nodes or moves the primary (a round then would
 * only fail, or hold the primary's locks under a switchover); a snapshot or an account or
 * variable sync leaves the primary serving.
 */
export function roundsMayRunDuring(busy: string | undefined): boolean {
  return busy === undefined || busy === 'snapshot' || busy.startsWith('sync-');
}

export function createArchiver(d: ArchiverDeps) {
  const log = d.logger.child({ component: 'binlog-archive' });
  const running = new Map<number, Promise<void>>();
  /** Per database: what cancels its rounds when it is deleted (stop). */
  const cancels = new Map<number, AbortController>();
  /** Per database: the time of the last successful flush (every event before it is archived). */
  const covered = new Map<number, number>();
  const oldest = new Map<number, number>();
  const physicalRetry = new Map<number, number>();
  const physicalFailures = new Map<number, number>();
  /** Databases whose leftover segments (a copy killed midway by an earlier run) were removed. */
  const swept = new Set<number>();

  /**
   * Copies binlog `file` into the spool folder in the node's run folder, by the tool running as
   * the node's uid; returns where, with that uid. The run folder and the spool are the node's, so
   * the agent makes and cleans the spool without following links, and reads back only a file
   * that uid owns (no-follow.ts).
   */
  async function copy(c: ArchivedDatabase, node: number, file: string, nodeSocket: string, signal: AbortSignal): Promise<{ path: string; uid: number }> {
    // The name comes from the server (SHOW BINARY LOGS): a plain file name, nothing else.
    if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(file)) throw new Error(`the server named a binlog ${JSON.stringify(file)}`);
    const name = c.nodeName(node);
    const hostRun = dirname((await d.runtime.connection(name)).socketPath);
    const spool = join(hostRun, 'binlog-spool');
    // The copy runs as the server's user; the spool must be its own.
    const owner = await stat(hostRun);
    await ensureDir(spool, { mode: 0o700, owner: { uid: owner.uid, gid: owner.gid } });
    await removeTree(join(spool, file));
    const res = await d.runtime.exec(name, ['mariadb-binlog', '--user=root', '--read-from-remote-server', '--raw',
      `--result-file=${join(dirname(nodeSocket), 'binlog-spool')}/`, file], { env: { MYSQL_PWD: c.state!.adminPassword }, signal });
    if (signal.aborted) await removeTree(join(spool, file));
    signal.throwIfAborted();
    if (res.exitCode !== 0) throw new Error(`mariadb-binlog could not copy ${file} (${res.exitCode}): ${clientError(res.stderr)}`);
    return { path: join(spool, file), uid: owner.uid };
  }

  async function store(c: ArchivedDatabase, seq: number, local: { path: string; uid: number }, meta: Omit<SegmentManifest, 'format' | 'encryption' | 'file' | 'sizeBytes' | 'sha256' | 'databaseId' | 'seq'>, signal: AbortSignal): Promise<void> {
    const encrypted = d.encryptAll === true || c.desired?.encrypted === true;
    const file = encrypted ? 'binlog.zst.aes' : 'binlog.zst';
    let input: FileHandle | undefined;
    try {
      input = await openOwnedFile(local.path, local.uid);
      const rawBytes = (await input.stat()).size;
      // The key before the store's stream, which nothing listens to until sealedWriter (dump-backup.ts).
      const key = encrypted ? await databaseKey(c) : undefined;
      const out = await d.segments.writer(c.id, seq, file);
      const sealed = sealedWriter(out, { level: STORE_ZSTD_LEVEL, codec: 'zstd', key });
      await pipeline(input.createReadStream(), sealed.input, { signal });
      const { sizeBytes, sha256 } = await sealed.done;
      signal.throwIfAborted();
      await d.segments.commit({
        ...meta, seq, databaseId: c.id, file, sizeBytes, rawBytes, sha256,
        format: formatOf('binlog', 'zstd', encrypted),
        ...(encrypted ? { encryption: { scheme: BACKUP_CIPHER, frameBytes: FRAME_BYTES } } : {}),
      });
      // A delete that ran meanwhile removed the database's storage: nothing may be left behind.
      if (c.deleted) await d.segments.remove(c.id, seq);
    } catch (err) {
      await d.segments.remove(c.id, seq).catch(() => undefined);
      throw err;
    } finally {
      await input?.close().catch(() => undefined);
      await removeTree(local.path);
    }
  }

  /** Whether a fork is reading database id's objects (an unexpired read lease): nothing of it is removed now. */
  async function readLeased(id: number): Promise<boolean> {
    if (!d.leases || !(await leased(d.leases, id, d.clock.now()))) return false;
    log.info({ database: id }, 'retention waits: a fork is reading the database\'s objects');
    return true;
  }

  async function round(c: ArchivedDatabase, signal: AbortSignal, asked: RoundOptions): Promise<void> {
    if (c.deleted || !c.state || signal.aborted) return;
    const s = c.state;
    const p = s.primary;
    const found = await withAdmin(await c.adminTarget(p), async (x) => {
      const list = async () => {
        const files = (await q(x, 'SHOW BINARY LOGS')).map((r) => String(r.Log_name));
        const starts: string[] = [];
        for (const f of files) starts.push(String((await q(x, 'SELECT BINLOG_GTID_POS(?, 4) AS pos', [f]))[0]?.pos ?? ''));
        return { files, starts };
      };
      // Read before the check: a transaction committed before this instant is in the binlog.
      const flushedMs = d.clock.now();
      const current = String((await q(x, 'SELECT @@gtid_binlog_pos AS p'))[0]?.p ?? '');
      let { files, starts } = await list();
      // Only a file holding transactions is closed: an idle database gets no new file a minute.
      const active = starts.at(-1) ?? '';
      if (!(gtidLe(current, active) && gtidLe(active, current))) {
        await x.query('FLUSH BINARY LOGS');
        ({ files, starts } = await list());
      }
      return { flushedMs, files, starts, socket: await serverSocket(x) };
    });
    signal.throwIfAborted();
    let bases = basesOf(await d.backups.refresh(c.id));
    if (!swept.has(c.id)) {
      // Rounds of a database never overlap, so no segment of it is being written now.
      for (const sq of await d.segments.unfinished(c.id)) await d.segments.remove(c.id, sq);
      swept.add(c.id);
    }
    let segments = await d.segments.list(c.id);
    const fresh = async (why: string) => {
      const m = await d.backups.takeBase(c, { signal });
      log.info({ database: c.id, backup: m.id, why }, 'binlog chain started from a base backup');
      return m.snapshotGtid ?? '';
    };
    const newestBase = [...bases].sort((a, b) => b.finishedMs - a.finishedMs)[0];
    // Continue the archive from its end, or start from the newest base when that is newer.
    const end = archiveEnd(segments)?.gtidEnd;
    let pos = !newestBase ? await fresh('no backup yet') : end !== undefined && gtidLe(newestBase.snapshotGtid, end) ? end : newestBase.snapshotGtid;
    const closed = found.files.slice(0, -1);
    let seq = Math.max((segments.at(-1)?.seq ?? 0) + 1, c.state?.nextSegmentSeq ?? 1);
    for (let i = 0; i < closed.length; i++) {
      const start = found.starts[i]!;
      const fileEnd = found.starts[i + 1]!;
      if (gtidLe(fileEnd, pos)) continue;
      if (!gtidLe(start, pos)) {
        log.warn({ database: c.id, archivedUpTo: pos, primaryFrom: start }, 'the primary lacks the binlogs after the archive');
        pos = await fresh('gap in the binlogs');
        if (gtidLe(fileEnd, pos) || !gtidLe(start, pos)) continue;
      }
      const local = await copy(c, p, closed[i]!, found.socket, signal);
      await updateState(c, { nextSegmentSeq: seq + 1 });
      await store(c, seq, local, { gtidStart: start, gtidEnd: fileEnd, closedMs: found.flushedMs, sourceFile: closed[i]!, node: p }, signal);
      seq++;
      pos = fileEnd;
    }
    covered.set(c.id, found.flushedMs);
    await keepPhysicalRecent(c, signal, asked.physicalBase === true, found.starts[0] ?? '');
    signal.throwIfAborted();
    // Retention: what no instant inside it needs any more.
    bases = basesOf(await d.backups.refresh(c.id));
    segments = await d.segments.list(c.id);
    const retentionMs = (c.desired?.binlogRetentionSeconds ?? 0) > 0 ? c.desired!.binlogRetentionSeconds * 1000 : DEFAULT_RETENTION_MS;
    let drop = prune(bases, segments, d.clock.now(), retentionMs);
    // A fork reading the database's objects holds a lease on them (read-lease.ts): retention waits
    // for a round after it ends. Checked just before the deletes.
    if (drop.bases.length + drop.segments.length > 0 && await readLeased(c.id)) drop = { bases: [], segments: [] };
    for (const id of drop.bases) await d.backups.removeBase(c.id, id);
    for (const sq of drop.segments) await d.segments.remove(c.id, sq);
    if (drop.bases.length + drop.segments.length > 0) {
      bases = basesOf(await d.backups.refresh(c.id));
      segments = await d.segments.list(c.id);
    }
    const o = oldestRestorable(bases, segments);
    if (o === undefined) oldest.delete(c.id);
    else oldest.set(c.id, o);
  }

  /**
   * Keeps a recent physical base (docs/agent.md §6, "Binlog archive and forks"): once the binlogs
   * archived after the newest one pass PHYSICAL_REFRESH_BYTES (or there is none), or the primary's
   * oldest binlog (`primaryFrom`, where it starts) begins after the newest one's position, the
   * round takes another, and hidden physical bases beyond the newest PHYSICAL_KEEP go unless the
   * oldest restorable instant needs them (older ones only make a fork replay longer). Why the
   * second: a member of a spread cluster rebuilt from the newest base replicates the rest from the
   * primary (binlog/member-seed.ts), which it cannot once the primary has purged that part
   * (expire_logs_days, a quiet database's base can be older than that).
   */
  async function keepPhysicalRecent(c: ArchivedDatabase, signal: AbortSignal, asked: boolean, primaryFrom: string): Promise<void> {
    if (asked && c.desired?.encrypted === true) throw new Error(`database ${c.id} is encrypted: its archive takes no physical base`);
    if (c.desired?.encrypted === true || (!asked && d.clock.now() < (physicalRetry.get(c.id) ?? 0))) return;
    const newest = (await d.backups.refresh(c.id)).filter((m) => isPhysical(m) && m.snapshotGtid !== undefined)
      .sort((a, b) => a.finishedMs - b.finishedMs).at(-1);
    const segments = await d.segments.list(c.id);
    const pending = newest === undefined ? Infinity
      : segments.reduce((n, x) => n + bytesAfter(x, newest), 0);
    const purged = newest !== undefined && !gtidLe(primaryFrom, newest.snapshotGtid ?? '');
    if (!asked && pending < PHYSICAL_REFRESH_BYTES && !purged) return;
    let m: BackupManifest;
    try {
      m = await d.backups.takeBase(c, { physicalOnly: true, signal });
    } catch (err) {
      // Whoever asked for the base is told; no retry is scheduled for it.
      if (signal.aborted || asked) throw err;
      // The chain already has a base, so nothing is lost but fork speed; the failure is logged
      // (with mariadb-backup's reason) by the backup service.
      const failures = (physicalFailures.get(c.id) ?? 0) + 1;
      physicalFailures.set(c.id, failures);
      const waitMs = Math.min(PHYSICAL_RETRY_MAX_MS, PHYSICAL_RETRY_MS * 2 ** (failures - 1));
      physicalRetry.set(c.id, d.clock.now() + waitMs);
      log.warn({ database: c.id, failures, retryInS: waitMs / 1000, err: (err as Error).message }, 'no new physical base for forks; trying again later');
      return;
    }
    physicalFailures.delete(c.id);
    log.info({ database: c.id, backup: m.id, binlogBytes: Number.isFinite(pending) ? pending : undefined, purged }, 'new physical base for forks');
    const list = await d.backups.refresh(c.id);
    let bases = basesOf(list);
    const floor = oldestRestorable(bases, segments);
    const hidden = list.filter((x) => x.type === 'base' && isPhysical(x)).sort((a, b) => a.finishedMs - b.finishedMs);
    const older = hidden.slice(0, -PHYSICAL_KEEP);
    if (older.length > 0 && await readLeased(c.id)) return;
    for (const old of older) {
      const without = bases.filter((b) => b.id !== old.id);
      if (oldestRestorable(without, segments) !== floor) continue;
      await d.backups.removeBase(c.id, old.id);
      bases = without;
    }
  }

  /**
   * One round for database c; rounds of one database never overlap (a second waits for the
   * first). A round cancelled by `stop` resolves: it failed only because it was asked to stop.
   */
  function archive(c: ArchivedDatabase, o: RoundOptions = {}): Promise<void> {
    let ac = cancels.get(c.id);
    if (!ac) cancels.set(c.id, (ac = new AbortController()));
    const signal = ac.signal;
    const prev = running.get(c.id) ?? Promise.resolve();
    const next = prev.catch(() => undefined).then(() => round(c, signal, o)).catch((err: unknown) => {
      if (!signal.aborted) throw err;
      log.info({ database: c.id, err: (err as Error).message, why: (signal.reason as Error | undefined)?.message }, 'binlog archive round cancelled');
    });
    // The caller handles `next`'s failure; the bookkeeping copy must not be an unhandled rejection.
    const tracked: Promise<void> = next.then(() => undefined, () => undefined).finally(() => {
      if (running.get(c.id) === tracked) running.delete(c.id);
    });
    running.set(c.id, tracked);
    return next;
  }

  /**
   * Before a database's servers and folders go (docs/agent.md, "Delete"): cancels its round in
   * flight (a copy or base is stopped and its partial files removed) and resolves once no round
   * of it runs any more, so none writes into or re-creates a removed folder afterwards.
   */
  async function stop(id: number): Promise<void> {
    await interrupt(id, `database ${id} is being deleted`);
    forget(id);
  }

  /**
   * Cancels database id's round in flight, if any (its copy or base stopped, partial files
   * removed), and resolves once no round of it runs; the next round starts afresh. For an action
   * that restarts nodes or switches the primary over: a physical base copy holds backup locks on
   * the primary and grows its redo log for the copy, and a switchover's `SET GLOBAL read_only`
   * beside them was seen to wait for ever (the rolling restart then never ended).
   */
  async function interrupt(id: number, why: string): Promise<void> {
    cancels.get(id)?.abort(new Error(why));
    cancels.delete(id);
    while (running.has(id)) await running.get(id);
  }

  function forget(id: number): void {
    covered.delete(id);
    oldest.delete(id);
    physicalRetry.delete(id);
    physicalFailures.delete(id);
    swept.delete(id);
  }

  /**
   * Whether a round may run now: a live, provisioned, running primary not being restored, run by
   * this agent. The binlog is read on the primary's node: on an agent of a spread cluster whose
   * local members are replicas (its primary's member moved off, say) there is nothing to archive,
   * and the agent that runs the primary continues the archive from the store's end.
   */
  function archivable(c: ArchivedDatabase): boolean {
    const s = c.state;
    return !!s?.provisioned && !s.suspended && !c.deleted && !!c.desired && c.desired.state !== 'suspended' && roundsMayRunDuring(c.busy)
      && c.nodeIndexes().includes(s.primary);
  }

  return {
    archive,
    archivable,
    interrupt,
    busy: (id: number) => running.has(id),
    /** Every event committed before this instant is archived (0 = not known since the agent started). */
    coveredUntil: (id: number) => covered.get(id) ?? 0,
    oldestRestoreMs: (id: number) => oldest.get(id) ?? 0,
    stop,
    forget,
  };
}

export type Archiver = ReturnType<typeof createArchiver>;
