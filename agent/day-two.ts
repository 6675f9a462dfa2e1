import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import cron from 'node-cron';
import type { Agent } from './agent.js';
import type { ControllerExtras, DatabaseController } from './database/controller.js';
import { createLocalBackupStorage, type BackupStorage } from './backup/backup-storage.js';
import { createBackupService } from './backup/backup-service.js';
import { autoBackupsToPrune, autoLabel, dueAutoBackupDay, utcDay } from './backup/schedule.js';
import { keyToReport } from './backup/backup-key.js';
import { sealManifests } from './backup/sealed-manifest.js';
import { createLocalReadLeases, deferredPurges, leased, withReadLease, type ReadLeases } from './backup/read-lease.js';
import { isInWindow } from '../lib/maintenance-window.js';
import type { OperationHandlers } from './operations.js';
import { createArchiver, roundsMayRunDuring, type RoundOptions } from './binlog/archiver.js';
import { forkStopMs, seedFork } from './binlog/replay.js';
import { seedMemberFromBase } from './binlog/member-seed.js';
import { createLocalSegmentStorage, type SegmentStorage } from './binlog/segment-storage.js';
import { updateState } from './database/state.js';
import { systemClock } from '../lib/clock.js';

/** How often each database's binlog is closed and archived (wall time of the injected clock). */
export const BINLOG_ARCHIVE_MS = 60_000;

/**
 * How long an action waits for its database's archive round to stop (a copy killed, its partial
 * files removed, the primary's redo log given back its size) before it goes on regardless.
 */
const ROUND_STOP_WAIT_MS = 60_000;

/** A failed auto backup is tried again after this long (of the injected clock). */
const AUTO_RETRY_MS = 5 * 60_000;

export interface DayTwo extends ControllerExtras {
  handlers: OperationHandlers;
  /**
   * Runs database `id`'s archive round now (after one in flight) and resolves once it has
   * archived everything committed before the call; with `physicalBase` the round also takes a
   * physical base (bench/provision/store.ts asks for the base it measures instead of waiting).
   */
  archiveNow(id: number, o?: RoundOptions): Promise<void>;
  tick(): void;
  close(): Promise<void>;
}

/**
 * Day-two services wired onto the agent (docs/agent.md §6, §7): backups with their storage, the
 * auto-backup schedule, maintenance windows. The decisions are pure functions of the injected clock
 * (backup/schedule.ts, lib/maintenance-window.ts); node-cron and the reconcile loop only tick.
 */
export function createDayTwo(agent: Agent, opts: { storage?: BackupStorage; segments?: SegmentStorage; leases?: ReadLeases; binlogArchiveMs?: number; remote?: boolean } = {}): DayTwo {
  const log = agent.logger.child({ component: 'day-two' });
  /**
   * The backup key of database `id` as this agent holds it: its own (state, or the one the
   * control plane sent), or the one sent with a fork or recovery that reads it from the store.
   */
  const keyOf = (id: number): string | undefined => {
    const own = agent.databases().find((x) => x.id === id);
    const key = own?.state?.backupKey || own?.desired?.backupKey;
    if (key) return key;
    return agent.databases().find((x) => Number(x.desired?.forkSource ?? 0) === id && x.desired?.forkSourceKey)?.desired?.forkSourceKey;
  };
  const raw = opts.storage ?? createLocalBackupStorage(join(agent.stateDir, 'backups'));
  // A store off the host sees no label nor schema name a tenant wrote (sealed-manifest.ts).
  const storage = opts.remote ? sealManifests(raw, keyOf) : raw;
  // A store off the host gets every database's files encrypted (docs/agent.md, "Backup store").
  const backups = createBackupService({ storage, runtime: agent.runtime, logger: agent.logger, clock: agent.clock, encryptAll: opts.remote });
  const segments = opts.segments ?? createLocalSegmentStorage(join(agent.stateDir, 'backups'));
  const leases = opts.leases ?? createLocalReadLeases(join(agent.stateDir, 'backups'));
  const archiver = createArchiver({ runtime: agent.runtime, segments, backups, clock: agent.clock, logger: agent.logger, encryptAll: opts.remote, leases });
  const purges = deferredPurges(join(agent.stateDir, 'store-purges.json'));
  let purging = false;

  /**
   * The store's objects of deleted databases, and of customer backups deleted, whose purge waited
   * for a fork or restore reading them (a read lease): removed once no lease of their database is
   * live. Kept in the agent's state folder, so a restart still removes them.
   */
  async function purgeDeferred(): Promise<void> {
    if (purging || (purges.ids().length === 0 && purges.backups().length === 0)) return;
    purging = true;
    try {
      for (const id of purges.ids()) {
        if (await leased(leases, id, agent.clock.now())) continue;
        await storage.removeAll(id);
        await purges.drop(id);
        log.info({ database: id }, 'deleted database\'s objects removed from the store: no fork reads them any more');
      }
      for (const { database, backup } of purges.backups()) {
        if (await leased(leases, database, agent.clock.now())) continue;
        await storage.remove(database, backup);
        await purges.dropBackup(database, backup);
        log.info({ database, backup }, 'deleted backup\'s data removed from the store: no fork or restore reads it any more');
      }
    } catch (err) {
      log.warn({ err }, 'deferred purge of a deleted database\'s objects failed; retrying');
    } finally {
      purging = false;
    }
  }
  const archiveEvery = opts.binlogArchiveMs ?? BINLOG_ARCHIVE_MS;
  const nextArchive = new Map<number, number>();
  /** Per database: what cancels its backups (auto, snapshot) when it is deleted, and those running. */
  const work = new Map<number, { ac: AbortController; tasks: Set<Promise<void>> }>();

  /** Runs a backup of c that a delete cancels (stopWork) and waits for. */
  function cancellable<T>(c: DatabaseController, fn: (signal: AbortSignal) => Promise<T>): Promise<T> {
    if (c.deleted) return Promise.reject(new Error(`database ${c.id} was deleted`));
    let w = work.get(c.id);
    if (!w) work.set(c.id, (w = { ac: new AbortController(), tasks: new Set() }));
    const tasks = w.tasks;
    const p = fn(w.ac.signal);
    const settled: Promise<void> = p.then(() => undefined, () => undefined).finally(() => tasks.delete(settled));
    tasks.add(settled);
    return p;
  }

  /**
   * Before an action that restarts nodes or moves the primary: the database's archive round in
   * flight is stopped (archiver.interrupt says why) and the next one starts as soon as the action
   * is over. A round that does not stop within ROUND_STOP_WAIT_MS is left to finish on its own:
   * the action must not wait for ever on a copy.
   */
  async function beforeAction(c: DatabaseController, label: string): Promise<void> {
    if (roundsMayRunDuring(label) || !archiver.busy(c.id)) return;
    log.info({ database: c.id, action: label }, 'stopping the binlog archive round for the action');
    // Wall time: this waits on real work, whatever clock the agent was given.
    let timer: ReturnType<typeof systemClock.setTimeout> | undefined;
    const stopped = await Promise.race([
      archiver.interrupt(c.id, `the ${label} action restarts or moves the database's nodes`).then(() => true),
      new Promise<boolean>((r) => (timer = systemClock.setTimeout(() => r(false), ROUND_STOP_WAIT_MS))),
    ]);
    timer?.cancel();
    if (!stopped) log.warn({ database: c.id, action: label }, 'the binlog archive round did not stop in time; the action goes on beside it');
    nextArchive.delete(c.id);
  }

  async function stopWork(c: DatabaseController): Promise<void> {
    const w = work.get(c.id);
    work.delete(c.id);
    w?.ac.abort(new Error(`database ${c.id} is being deleted`));
    await Promise.all([archiver.stop(c.id), ...(w?.tasks ?? [])]);
    archiveSince.delete(c.id);
    archiveFailures.delete(c.id);
    behind.delete(c.id);
  }

  /** Per database: when this run first saw it archivable (the lag's start before any round succeeded). */
  const archiveSince = new Map<number, number>();
  /** Databases whose lag was announced by an event (a second one says when they caught up). */
  const behind = new Set<number>();
  /** Rounds failed in a row, per database: the retry waits longer after each (backoff). */
  const archiveFailures = new Map<number, number>();

  /** How far database id's archive is behind: since the last round that succeeded. */
  function archiveLagMs(id: number, now: number): number {
    const covered = archiver.coveredUntil(id);
    return Math.max(0, now - (covered > 0 ? covered : (archiveSince.get(id) ?? now)));
  }

  /**
   * Binlog archiving (agent/binlog): a round per database every `archiveEvery`, never two at once.
   * A failed round (the backup store unreachable, say) is retried with backoff; once the archive
   * is three intervals behind an event says so, and another when it caught up. The database
   * itself is not touched: its binlogs wait on the primary until the store takes them.
   */
  function archiveTick(c: DatabaseController, now: number): void {
    if (!archiver.archivable(c)) {
      // Its primary runs on another agent now (a spread cluster's member moved off): this agent's
      // archive of it ends, with what it knew of it (lag, failures, the restorable window), which
      // the primary's agent reports from now on.
      if (c.state && !c.nodeIndexes().includes(c.state.primary) && archiveSince.delete(c.id)) {
        archiveFailures.delete(c.id);
        behind.delete(c.id);
        nextArchive.delete(c.id);
        archiver.forget(c.id);
        log.info({ database: c.id, primary: c.state.primary }, 'binlog archive stopped here: the primary runs on another agent');
      }
      return;
    }
    if (!archiveSince.has(c.id)) archiveSince.set(c.id, now);
    if (archiver.busy(c.id) || now < (nextArchive.get(c.id) ?? 0)) return;
    nextArchive.set(c.id, now + archiveEvery);
    archiver.archive(c).then(() => {
      archiveFailures.delete(c.id);
      if (behind.delete(c.id)) c.emit('database_backup_create', 'the binlog archive caught up: point-in-time restores reach the present again', 'notification');
    }, (err: Error) => {
      const failures = (archiveFailures.get(c.id) ?? 0) + 1;
      archiveFailures.set(c.id, failures);
      log.warn({ err, database: c.id, failures }, 'binlog archive round failed');
      // Tried again sooner than a full interval at first, then less often: 1, 2, 4... s of the
      // interval's fraction, never longer than the interval itself.
      const retry = Math.min(archiveEvery, 10_000, 1000 * 2 ** Math.min(failures - 1, 10));
      nextArchive.set(c.id, agent.clock.now() + retry);
      const lag = archiveLagMs(c.id, agent.clock.now());
      if (!c.deleted && lag > 3 * archiveEvery && !behind.has(c.id)) {
        behind.add(c.id);
        c.emit('database_backup_create', `the binlog archive is ${Math.round(lag / 1000)} s behind: ${err.message.slice(0, 200)}; retrying`, 'notification');
      }
    });
  }
  const autoRunning = new Set<number>();
  const retryAfter = new Map<number, number>();
  const loaded = new Set<number>();

  async function auto(c: DatabaseController, day: string): Promise<void> {
    autoRunning.add(c.id);
    const now = agent.clock.now();
    try {
      await cancellable(c, (signal) => backups.take(c, { type: 'auto', label: autoLabel(now, backups.autoSuffix()), target: 'secondary', nowMs: now, signal }));
      agent.metrics.backups.inc({ type: 'auto', result: 'ok' });
      // Days only move forward: a day taken is never taken again (docs/agent.md §6).
      const last = c.state!.lastAutoBackupDay;
      await updateState(c, { lastAutoBackupDay: last !== undefined && last > day ? last : day });
      // A fork reading the objects (a read lease) defers the pruning to the next auto backup.
      if (!(await leased(leases, c.id, agent.clock.now()))) {
        for (const old of autoBackupsToPrune(await backups.refresh(c.id))) await backups.remove(c, old.id);
      }
      c.emit('database_backup_create', `auto backup for ${day} taken`);
    } catch (err) {
      // Only a delete (marked before it cancels) stops a backup on purpose.
      if (c.deleted) {
        log.info({ database: c.id, err: (err as Error).message }, 'auto backup cancelled: the database is being deleted');
        return;
      }
      // A failed auto backup is retried a few minutes later, not on every tick.
      retryAfter.set(c.id, agent.clock.now() + AUTO_RETRY_MS);
      agent.metrics.backups.inc({ type: 'auto', result: 'error' });
      log.error({ err, database: c.id }, 'auto backup failed');
    } finally {
      autoRunning.delete(c.id);
    }
  }

  function tick(): void {
    const now = agent.clock.now();
    void purgeDeferred();
    let lag = 0;
    for (const c of agent.databases()) if (archiver.archivable(c) && archiveSince.has(c.id)) lag = Math.max(lag, archiveLagMs(c.id, now));
    agent.metrics.archiveLag.set(lag / 1000);
    for (const c of agent.databases()) {
      const s = c.state;
      // A database fenced to move to another host writes nothing more to the store: its fence
      // archived everything, and the new host continues the archive and the backups.
      if (!s?.provisioned || s.suspended || c.deleted || !c.desired || c.movingOut) continue;
      archiveTick(c, now);
      if (!loaded.has(c.id)) {
        loaded.add(c.id);
        backups.refresh(c.id).catch((err) => log.warn({ err, database: c.id }, 'backup list unreadable'));
        const deferred = purges.backups().filter((b) => b.database === c.id).map((b) => b.backup);
        backups.removeUnfinished(c, deferred).catch((err) => log.warn({ err, database: c.id }, 'unfinished backups not removed'));
        // Once per agent start: a restore the previous run did not finish is undone (it waits
        // for the action lock; a restore operation arriving first undoes it itself).
        if (s.restoreInProgress) {
          backups.recoverInterrupted(c).catch((err) => log.error({ err, database: c.id }, 'interrupted restore not undone'));
          continue;
        }
      }
      // A new database's first auto backup is the next midnight's, not one at creation.
      if (s.lastAutoBackupDay === undefined) {
        updateState(c, { lastAutoBackupDay: utcDay(now) }).catch((err) => log.error({ err, database: c.id }, 'state not saved'));
        continue;
      }
      const due = dueAutoBackupDay({
        nowMs: now, lastDay: s.lastAutoBackupDay, scheduled: !!c.desired.backupsScheduled, requestedDay: c.desired.autoBackupDay ?? '',
        disconnectedSinceMs: agent.disconnectedSince(),
      });
      if (!due || autoRunning.has(c.id) || c.busy === 'restore' || now < (retryAfter.get(c.id) ?? 0)) continue;
      void auto(c, due);
    }
  }

  const task = cron.schedule('* * * * *', () => tick(), { timezone: 'UTC' });

  return {
    windowOpen: (c) => (c.desired?.updates ? isInWindow(c.desired.updates, agent.clock.now()) : false),
    extraReport: (c) => ({
      backups: backups.report(c.id), oldestRestoreMs: archiver.oldestRestoreMs(c.id), lastAutoBackupDay: c.state?.lastAutoBackupDay ?? '',
      // Only a key the control plane did not send, which it then adopts (backup-key.ts).
      backupKey: keyToReport(c) ?? '',
    }),
    seed: (c) => {
      const sourceId = Number(c.desired?.forkSource ?? 0);
      const source = agent.databases().find((x) => x.id === sourceId && !x.deleted);
      // A source run by another agent on the same object store is read from the store.
      const key = c.desired?.forkSourceKey ?? '';
      // A recovery names the database itself: its host was lost and it is rebuilt from its own objects.
      const recover = c.desired?.recoverFromStore === true && sourceId === c.id;
      const stored = opts.remote && key ? { id: sourceId, backupKey: key, ...(recover ? { recover, emit: c.emit.bind(c) } : {}) } : undefined;
      const read = () => seedFork({ runtime: agent.runtime, storage, segments, archiver, backups, logger: agent.logger }, c, source, forkStopMs(c.desired), stored);
      // While it reads, the fork holds a lease on the source's objects, which the source's
      // retention and delete honour (read-lease.ts); released when the seed ends, and the purge
      // of a source deleted meanwhile is tried at once.
      if (!sourceId) return read();
      return withReadLease({ leases, clock: agent.clock, logger: log }, sourceId, `fork-${c.id}`, read).finally(() => void purgeDeferred());
    },
    // A rebuilt member of a spread cluster reads the base the primary's agent stored, so only from
    // a store the agents share: local folders hold only what this agent wrote (the member then
    // replays the primary's binlog). The read holds a lease, as a fork's does, so the primary's
    // retention keeps the base meanwhile.
    seedMember: async (c, k) => {
      if (!opts.remote) return { skipped: 'the backup store is this agent\'s local folder, which holds no base the primary\'s agent took' };
      return withReadLease({ leases, clock: agent.clock, logger: log }, c.id, `member-${k}`,
        () => seedMemberFromBase({ runtime: agent.runtime, storage, logger: log }, c, k));
    },
    handlers: {
      // The core fence (operations.ts), and for a 1-node database fenced to move to another host
      // (docs/multi-host.md, "Draining a host") one more archive round: its binlog is closed and
      // shipped, so the store holds every transaction up to the position answered before the
      // control plane rebuilds the database elsewhere from it. A round that fails fails the fence
      // (the control plane abandons the move and the node serves writes again).
      fence: async (c, op) => {
        const position = await c.fence(Number(op.fence?.term ?? 0), op.fence?.member ?? 0);
        if (c.movingOut) {
          const started = agent.clock.now();
          await archiver.archive(c);
          if (archiver.coveredUntil(c.id) < started) throw new Error('the binlog archive round after the fence did not complete');
          log.warn({ database: c.id, position, ms: agent.clock.now() - started }, 'binlog archived up to the fence before the move');
        }
        return { position };
      },
      snapshot: async (c, op) => {
        const label = op.snapshot?.label ?? '';
        if (!/^[A-Za-z0-9_]{1,30}$/.test(label)) throw new Error('label must be 1-30 letters, digits or underscores');
        const target = op.snapshot?.target === 'secondary' ? 'secondary' : 'primary';
        const m = await c
          .runExclusive('snapshot', () => cancellable(c, (signal) => backups.take(c, { type: 'snapshot', label, target, nowMs: agent.clock.now(), signal })))
          .catch((err: unknown) => {
            agent.metrics.backups.inc({ type: 'snapshot', result: 'error' });
            throw err;
          });
        agent.metrics.backups.inc({ type: 'snapshot', result: 'ok' });
        // No event of our own: the operation's result completes the event the API recorded when
        // it asked for the snapshot, so a snapshot has exactly one (docs/databases.md, Events).
        return { backupId: m.id };
      },
      restore: async (c, op) => {
        // The backup read is the database's own: a lease on it defers a delete of that backup
        // (and retention) as a fork's does, should one arrive while the restore reads.
        await withReadLease({ leases, clock: agent.clock, logger: log }, c.id, `restore-${c.id}`, () => backups.restore(c, op.restore?.backupId ?? 0))
          .finally(() => void purgeDeferred());
        c.emit('database_backup_restore', `backup ${op.restore?.backupId} restored`);
      },
      // A fork or restore reading the database (a read lease): the backup is gone from every
      // list at once, its data once they have ended (purgeDeferred), as retention waits for them.
      deleteBackup: async (c, op) => {
        const id = op.deleteBackup?.backupId ?? 0;
        if (!(await leased(leases, c.id, agent.clock.now()))) return backups.remove(c, id);
        await backups.remove(c, id, { defer: () => purges.addBackup(c.id, id) });
        log.warn({ database: c.id, backup: id }, 'backup deleted; its data stays in the store until the forks or restores reading the database end');
      },
    },
    stopWork,
    beforeAction,
    removeStored: async (c) => {
      // With an object store the local folder holds nothing a fork reads (with the local store it
      // is the store, and goes below or with the deferred purge).
      if (opts.remote) await rm(join(agent.stateDir, 'backups', String(c.id)), { recursive: true, force: true });
      // A fork still reading its objects: they go once it has ended (purgeDeferred).
      if (await leased(leases, c.id, agent.clock.now())) {
        await purges.add(c.id);
        log.warn({ database: c.id }, 'deleted; its objects in the store stay until the forks reading them end');
        return;
      }
      await storage.removeAll(c.id);
    },
    tick,
    async archiveNow(id, o) {
      const c = agent.database(id);
      if (!c || !archiver.archivable(c)) throw new Error(`database ${id} is not archived by this agent now`);
      const started = agent.clock.now();
      await archiver.archive(c, o);
      if (archiver.coveredUntil(id) < started) throw new Error(`the archive round of database ${id} did not complete`);
    },
    async close() {
      await task.stop();
      await task.destroy();
    },
  };
}
