import { createHash, randomBytes } from 'node:crypto';
import { pipeline } from 'node:stream/promises';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { BackupInfo } from '../../proto/gen/fulcrum/v1/BackupInfo.js';
import type { DatabaseController } from '../database/controller.js';
import { gtidCurrentPos, waitForGtid } from '../mysql/replication.js';
import { withAdmin } from '../mysql/admin.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import type { BackupManifest, BackupStorage } from './backup-storage.js';
import { assertLoadable, loadBackup } from './load-backup.js';
import { databaseKey } from './backup-key.js';
import { takePhysical } from './physical-backup.js';
import { writeDump } from './dump-backup.js';
import { snapshotGtidTap } from './snapshot-gtid.js';
import { applyState, updateState } from '../database/state.js';

/** What backups use of a database. */
export type BackupDatabase = Pick<DatabaseController,
  'id' | 'state' | 'desired' | 'clusterSize' | 'healthyReplicas' | 'nodeName' | 'adminTarget' | 'save' | 'emit'
  | 'syncAccounts' | 'runExclusive' | 'observe' | 'syncEndpoints' | 'deleted'>;

/** Backup id reserved for a restore's safety copy (customer backups count from 1). */
const SAFETY_ID = 0;
/** Hidden base backups (agent/binlog) take ids from here on. */
export const BASE_IDS = 1_000_000_000;

/** Backups the customer sees, lists, restores and deletes (not the safety copy nor a chain's base). */
export const isCustomerBackup = (m: BackupManifest): boolean => m.type === 'auto' || m.type === 'snapshot';

// Re-exported: the chain's tests read it from here.
export { snapshotGtidTap };

export interface TakeOptions {
  type: 'auto' | 'snapshot';
  label: string;
  target: 'primary' | 'secondary';
  /** Creation time from the injected clock. */
  nowMs: number;
  /** Aborted when the database is being deleted: the dump stops and leaves nothing behind. */
  signal?: AbortSignal;
}

/**
 * Logical backups and restores (docs/agent.md §6). A backup is one zstd stream (gzip in older ones, still read): the
 * customer's accounts (rows of the privilege tables, every value quoted by the driver:
 * customer-data.ts customerAccountsSql) followed by a
 * `mariadb-dump --single-transaction --routines --triggers --events` of every customer schema;
 * for `encrypted` databases it is then AES-256-GCM encrypted (backup-crypto.ts). The SHA-256 of
 * the stored bytes and a manifest are written last. linroot, root and the replication account
 * are not in it: the agent re-applies them from the desired state after a restore, so a backup
 * taken before a credentials reset restores cleanly.
 */
export function createBackupService(opts: { storage: BackupStorage; runtime: ContainerRuntime; logger: Logger; clock: Clock; encryptAll?: boolean }) {
  const log = opts.logger.child({ component: 'backups' });
  const manifests = new Map<number, BackupManifest[]>();
  const creating = new Map<number, BackupInfo[]>();

  async function refresh(dbId: number): Promise<BackupManifest[]> {
    const list = await opts.storage.list(dbId);
    manifests.set(dbId, list);
    return list;
  }

  function sourceNode(c: BackupDatabase, target: 'primary' | 'secondary'): number {
    if (target === 'secondary' || c.clusterSize > 1) {
      const replicas = c.healthyReplicas();
      if (replicas.length > 0) return replicas[0]!;
      if (target === 'secondary' && c.clusterSize > 1) throw new Error('no healthy replica to back up from');
    }
    return c.state!.primary;
  }

  /**
   * Whether c's files are encrypted before they are stored: an `encrypted` database's always,
   * every database's when the store is off the host (`encryptAll`: its operator sees no rows).
   */
  const encryptsFor = (c: BackupDatabase) => opts.encryptAll === true || c.desired?.encrypted === true;

  /** Writes backup `id` of database c from `node` (dump-backup.ts) and lists it. */
  async function dump(c: BackupDatabase, id: number, node: number, meta: Pick<BackupManifest, 'label' | 'type' | 'createdMs'>, signal?: AbortSignal): Promise<BackupManifest> {
    const started = Date.now();
    const encrypted = encryptsFor(c);
    const manifest = await writeDump({ storage: opts.storage, runtime: opts.runtime }, c, id, node, encrypted, meta, signal);
    log.info({ database: c.id, backup: id, type: meta.type, bytes: manifest.sizeBytes, encrypted, ms: Date.now() - started, node }, 'backup taken');
    await refresh(c.id);
    return manifest;
  }

  async function take(c: BackupDatabase, o: TakeOptions): Promise<BackupManifest> {
    const s = c.state!;
    if (o.type === 'snapshot') {
      const existing = (await refresh(c.id)).filter((b) => b.type === 'snapshot');
      if (existing.some((b) => b.label === o.label)) throw new Error(`a backup labelled ${o.label} already exists`);
      if (existing.length >= 3) throw new Error('this database already has 3 snapshot backups; delete one first');
    }
    // The database's own sequence (kept in its state), moved past any id already in storage: a
    // backup id names one backup forever, also for clients that remember a deleted one. Hidden
    // binlog bases have their own id range and do not move it.
    const stored = (await refresh(c.id)).reduce((m, b) => (b.id < BASE_IDS ? Math.max(m, b.id) : m), 0);
    const id = Math.max(s.nextBackupId, stored + 1);
    await updateState(c, { nextBackupId: id + 1 });
    const placeholder: BackupInfo = { id, label: o.label, type: o.type, createdMs: o.nowMs, sizeBytes: 0, status: 'creating', target: o.target };
    creating.set(c.id, [...(creating.get(c.id) ?? []), placeholder]);
    try {
      // The binlog archive's next file starts here: a fork from this backup replays only what
      // follows it, not the rest of a file written before it (agent/binlog).
      await withAdmin(await c.adminTarget(s.primary), (x) => x.query('FLUSH BINARY LOGS')).catch(() => undefined);
      return await dump(c, id, sourceNode(c, o.target), { label: o.label, type: o.type, createdMs: o.nowMs }, o.signal);
    } finally {
      creating.set(c.id, (creating.get(c.id) ?? []).filter((b) => b.id !== id));
    }
  }

  /** Reads the whole file and compares its SHA-256 with the manifest, before anything changes. */
  async function verify(m: BackupManifest): Promise<void> {
    const hash = createHash('sha256');
    try {
      await pipeline(opts.storage.reader(m.databaseId, m.id, m.file), async function* (src) {
        for await (const chunk of src) hash.update(chunk as Buffer);
      });
    } catch (err) {
      throw new Error(`backup ${m.id} cannot be read: ${(err as Error).message}; nothing was changed`);
    }
    const got = hash.digest('hex');
    if (got !== m.sha256) {
      throw new Error(`backup ${m.id} is corrupted: its checksum is ${got.slice(0, 12)}..., the manifest says ${m.sha256.slice(0, 12)}...; nothing was changed`);
    }
  }

  const replaceData = (c: BackupDatabase, p: number, m: BackupManifest) => loadBackup({ runtime: opts.runtime, storage: opts.storage }, c, p, m);

  /** linroot from the desired state, then every healthy replica caught up with the primary. */
  async function settle(c: BackupDatabase, p: number): Promise<void> {
    await c.syncAccounts();
    const pos = await withAdmin(await c.adminTarget(p), (x) => gtidCurrentPos(x));
    for (const k of c.healthyReplicas()) {
      await withAdmin(await c.adminTarget(k), (x) => waitForGtid(x, pos, 60));
    }
  }

  /**
   * Restores in place (the data planes route no client while the database is `restoring`):
   * verify, take a safety copy of the current data from the primary (same machinery, backup id 0, type `pre-restore`, never
   * listed), replace the data with the backup, re-apply linroot from the desired state, wait
   * for the replicas to agree, and let traffic back in. If the load fails at any point, the
   * safety copy is loaded the same way and the restore fails with the client's error: the
   * database is left with the data it had. hosts, port and credentials do not change.
   */
  async function restore(c: BackupDatabase, backupId: number): Promise<void> {
    const m = (await refresh(c.id)).find((b) => b.id === backupId && isCustomerBackup(b));
    if (!m) throw new Error(`backup ${backupId} does not exist`);
    await verify(m);
    // An old backup holding server-rendered account text is refused here, before the safety copy.
    await assertLoadable({ runtime: opts.runtime, storage: opts.storage }, c, m);
    await c.runExclusive('restore', async () => {
      const s = c.state!;
      const p = s.primary;
      try {
        // A restore interrupted by an agent crash is undone first, or its half-loaded data
        // would become this restore's safety copy.
        await rollBackInterrupted(c);
        let safety: BackupManifest;
        try {
          await opts.storage.remove(c.id, SAFETY_ID);
          safety = await dump(c, SAFETY_ID, p, { label: 'pre-restore', type: 'pre-restore', createdMs: opts.clock.now() });
        } catch (err) {
          throw new Error(`backup ${m.id} was not restored: the safety copy of the current data failed (${(err as Error).message}); nothing was changed`);
        }
        await updateState(c, { restoreInProgress: { backupId: m.id, startedMs: opts.clock.now() } });
        try {
          await replaceData(c, p, m);
        } catch (err) {
          const cause = (err as Error).message;
          log.warn({ database: c.id, backup: m.id, err: cause }, 'restore failed; putting the previous data back');
          try {
            await replaceData(c, p, safety);
            await settle(c, p);
          } catch (err2) {
            log.error({ database: c.id, err: err2 }, 'the safety copy could not be loaded');
            throw new Error(`${cause}; putting the previous data back also failed (${(err2 as Error).message}); the safety copy is kept as backup ${SAFETY_ID} of database ${c.id} in the agent's storage and is loaded again when the agent restarts`);
          }
          await finishRestore(c);
          throw new Error(`${cause}; the data from before the restore was put back`);
        }
        await settle(c, p);
        await finishRestore(c);
      } finally {
        await refresh(c.id).catch(() => undefined);
        await c.observe().catch(() => undefined);
        await c.syncEndpoints().catch((err) => log.error({ err }, 'proxy_protocol_networks not restored'));
      }
      log.info({ database: c.id, backup: m.id }, 'restored');
    });
  }

  async function finishRestore(c: BackupDatabase): Promise<void> {
    await updateState(c, { restoreInProgress: undefined });
    await opts.storage.remove(c.id, SAFETY_ID).catch(() => undefined);
  }

  /** Under the action lock: loads the safety copy of a restore the agent did not finish. */
  async function rollBackInterrupted(c: BackupDatabase): Promise<void> {
    const s = c.state!;
    if (!s.restoreInProgress) return;
    const safety = (await refresh(c.id)).find((b) => b.id === SAFETY_ID && b.type === 'pre-restore');
    if (!safety) {
      // The flag is only set once the safety copy is stored; without one nothing was changed.
      await updateState(c, { restoreInProgress: undefined });
      return;
    }
    const { backupId } = s.restoreInProgress;
    log.warn({ database: c.id, backup: backupId }, 'restore was interrupted; loading the data from before it');
    await verify(safety);
    await replaceData(c, s.primary, safety);
    await settle(c, s.primary);
    await finishRestore(c);
    c.emit('database_backup_restore', `restore of backup ${backupId} was interrupted; the data from before it was put back`, 'failed');
  }

  /**
   * Called by the agent's tick for a database whose state says a restore was interrupted
   * (the agent stopped mid-load): puts the previous data back.
   */
  async function recoverInterrupted(c: BackupDatabase): Promise<void> {
    if (!c.state?.restoreInProgress) return;
    await c.runExclusive('restore', async () => {
      try {
        await rollBackInterrupted(c);
      } finally {
        await refresh(c.id).catch(() => undefined);
        await c.observe().catch(() => undefined);
        await c.syncEndpoints().catch((err) => log.error({ err }, 'proxy_protocol_networks not restored'));
      }
    });
  }

  /**
   * Once per agent start: the files of backups an earlier run began but never finished (killed
   * mid-dump, so no manifest) are removed. Never listed, they would only fill the storage. A
   * backup this run is writing is left alone, and so is a restore's safety copy, which the next
   * restore replaces and an interrupted one deals with (rollBackInterrupted). So are the backups
   * in `deferred`: deleted while a fork read them, their data waits for the fork's lease to end.
   */
  async function removeUnfinished(c: BackupDatabase, deferred: readonly number[] = []): Promise<number[]> {
    const removed: number[] = [];
    for (const id of await opts.storage.unfinished(c.id)) {
      if (id === SAFETY_ID || deferred.includes(id) || (creating.get(c.id) ?? []).some((b) => b.id === id)) continue;
      await opts.storage.remove(c.id, id);
      removed.push(id);
    }
    if (removed.length > 0) log.warn({ database: c.id, backups: removed }, 'removed backups an earlier run left unfinished');
    return removed;
  }

  /** Removes a hidden base backup the binlog retention no longer needs. */
  async function removeBase(dbId: number, backupId: number): Promise<void> {
    if (backupId < BASE_IDS) return;
    await opts.storage.remove(dbId, backupId);
    await refresh(dbId);
  }

  /**
   * Deletes customer backup `backupId`. With `defer` (a read lease on the database) only its
   * manifest goes now, so it is listed nowhere, after `defer` recorded it (an agent stopped in
   * between leaves no unrecorded data); its data waits for the lease (day-two.ts, purgeDeferred).
   */
  async function remove(c: BackupDatabase, backupId: number, o: { defer?: () => Promise<void> } = {}): Promise<void> {
    const m = (await refresh(c.id)).find((b) => b.id === backupId);
    const writing = () => backupId >= BASE_IDS || (creating.get(c.id) ?? []).some((b) => b.id === backupId);
    if (m ? !isCustomerBackup(m) : writing()) throw new Error(`backup ${backupId} does not exist`);
    // Already deleted (sent again after a restart): "does not exist" would list it ready again.
    if (!m) return void (await (o.defer ? o.defer() : opts.storage.remove(c.id, backupId)));
    if (o.defer) await o.defer().then(() => opts.storage.withdraw(c.id, backupId));
    else await opts.storage.remove(c.id, backupId);
    await refresh(c.id);
  }

  function report(dbId: number): BackupInfo[] {
    const done: BackupInfo[] = (manifests.get(dbId) ?? []).filter(isCustomerBackup).map((m) => ({
      id: m.id, label: m.label, type: m.type, createdMs: m.createdMs, sizeBytes: m.sizeBytes, status: 'ready', target: m.target,
    }));
    return [...done, ...(creating.get(dbId) ?? [])];
  }

  /**
   * A hidden backup a binlog chain starts from (agent/binlog): taken like any other, from a
   * healthy replica when there is one, never listed, removed when the chain no longer needs it.
   * `physicalOnly`: a base wanted only to make forks faster (the chain already has one), so a
   * failed physical copy is an error rather than a dump, which would not make any fork faster.
   */
  async function takeBase(c: BackupDatabase, o: { physicalOnly?: boolean; signal?: AbortSignal } = {}): Promise<BackupManifest> {
    // Their own id range: customer backup ids stay the sequence clients see (1, 2, 3...).
    // A database deleted while its archive round ran has no state left to number a base in.
    if (!c.state) throw new Error(`database ${c.id} was deleted`);
    o.signal?.throwIfAborted();
    const next = () => {
      if (!c.state) throw new Error(`database ${c.id} was deleted`);
      const id = BASE_IDS + (c.state.nextBaseId ?? 1);
      applyState(c, { nextBaseId: (c.state.nextBaseId ?? 1) + 1 });
      return id;
    };
    let id = next();
    await c.save();
    const node = sourceNode(c, 'primary');
    const meta = { label: 'binlog base', type: 'base' as const, createdMs: opts.clock.now() };
    // Physical where a fork can load it: an `encrypted` database's data files are encrypted
    // with its own key file, which a fork does not have, so it keeps logical bases
    // (docs/agent.md §6, "Binlog archive and forks").
    if (c.desired?.encrypted === true) {
      if (o.physicalOnly) throw new Error(`database ${c.id} is encrypted: its bases are dumps`);
    } else {
      const started = Date.now();
      try {
        const m = await takePhysical({ runtime: opts.runtime, storage: opts.storage, backupKey: () => databaseKey(c), signal: o.signal, encrypt: encryptsFor(c) }, c, id, node, meta);
        log.info({ database: c.id, backup: id, bytes: m.sizeBytes, ms: Date.now() - started, node }, 'physical base backup taken');
        await refresh(c.id);
        return m;
      } catch (err) {
        const cause = (err as Error).message;
        // A database being deleted (its copy cancelled) needs no base at all.
        if (!c.state || c.deleted || !c.desired || o.signal?.aborted) throw err;
        if (o.physicalOnly) {
          log.warn({ database: c.id, backup: id, node, ms: Date.now() - started, err: cause }, 'physical base backup failed; forks keep the older base');
          throw new Error(`physical base backup failed: ${cause}`);
        }
        // The chain must not stop: a logical base is slower to fork from but works everywhere.
        // Loud on purpose: forks from it take minutes per GB instead of seconds.
        log.warn({ database: c.id, backup: id, node, ms: Date.now() - started, err: cause }, `physical base backup failed; taking a logical one: ${cause}`);
        id = next();
        await c.save();
      }
    }
    return dump(c, id, node, meta, o.signal);
  }

  return { take, takeBase, removeBase, verify, restore, recoverInterrupted, removeUnfinished, remove, refresh, report, autoSuffix: () => randomBytes(4).toString('base64url').slice(0, 6) };
}
