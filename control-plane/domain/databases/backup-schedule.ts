import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import { utcDay } from '../../../lib/utc-day.js';
import type { DatabaseRepository } from './repository.js';
import type { DatabaseRecord } from './model.js';
import { LruMap } from '../../../lib/lru.js';

/** An untaken day is announced again this often, in case the agents' replica never heard of it. */
export const REANNOUNCE_MS = 60_000;

/**
 * Whether a database's auto backup for `day` is due: it runs, and it was created on an earlier
 * day (a new database's first auto backup is the next midnight's, docs/agent.md §6).
 */
export function backupDue(d: DatabaseRecord, day: string): boolean {
  return !d.deleting && d.provisioned && d.runState === 'running' && utcDay(d.created) < day;
}

/**
 * The control plane's half of auto backups (docs/databases.md, "Auto backups"), run on the
 * replica holding the lease: claims each database's due day in the store, where (database, day)
 * is unique, so two replicas, or a new lease holder after a crash, never ask for a day twice. The
 * agents' desired state carries each database's newest claimed day; the agent takes it once and
 * reports it, which marks it taken.
 */
export class BackupScheduler {
  /** When this replica last announced each database's untaken day. */
  private readonly announced = new LruMap<string, number>(10_000);

  constructor(private readonly d: { repo: DatabaseRepository; clock: Clock; logger: Logger }) {}

  /**
   * One round; true when the agents' desired state must be rebuilt and sent (a day claimed now,
   * or one claimed earlier that is still untaken: its claimer may have died before telling anyone).
   */
  async tick(): Promise<boolean> {
    const now = this.d.clock.now();
    const day = utcDay(now);
    const newest = new Map((await this.d.repo.backupSlots()).map((s) => [s.databaseId, s]));
    let announce = false;
    for (const db of await this.d.repo.list()) {
      if (!backupDue(db, day)) continue;
      const s = newest.get(db.id);
      if (s && s.slot >= day) {
        if (s.taken === null && this.mayAnnounce(db.id, s.slot, now)) announce = true;
        continue;
      }
      if (await this.d.repo.claimBackupSlot(db.id, day, now)) {
        this.d.logger.info({ database: db.id, day }, 'auto backup requested');
        this.announced.set(`${db.id}:${day}`, now);
        announce = true;
      }
    }
    return announce;
  }

  private mayAnnounce(id: number, slot: string, now: number): boolean {
    const key = `${id}:${slot}`;
    const last = this.announced.get(key);
    if (last !== undefined && now - last < REANNOUNCE_MS) return false;
    this.announced.set(key, now);
    return true;
  }
}
