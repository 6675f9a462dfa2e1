import { gtidContains } from '../../lib/gtid.js';
import { q, withAdmin } from '../mysql/admin.js';
import { replicaStatus } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { markedSeeding } from './plan.js';
import { updateState, type DbState } from './state.js';

/**
 * A member of a semi_synch cluster spread over agents that is being seeded here (just placed,
 * with nothing applied, or rebuilt) acknowledges no write before it has caught up
 * (docs/multi-host.md, "Failover candidates"). The control plane never promotes a seeding
 * member, so a write acknowledged by it alone, while the other replica's IO thread lags, would be
 * lost by the failover that promotes that other replica. Its rpl_semi_sync_slave_enabled is set
 * OFF before its replication starts (attach, rejoin.ts: also after a node restart, whose config
 * file says ON) and ON again, with its IO thread restarted (which is when MariaDB reads it), once
 * it has applied what the primary had logged when its seeding began AND the desired state no
 * longer carries the control plane's seeding mark (DesiredMember.seeding). The control plane is
 * the one writer of that mark and clears it when the member reports the primary's position at
 * its placement; only then is the member a failover candidate, so it acknowledges no earlier.
 * A member rebuilt here without a mark (a control plane that sends none, or a rebuild the agent
 * decided on its own) turns on once caught up, as before the mark was sent.
 */

export type SeedAckContext = Pick<ClusterContext, 'state' | 'semiSync' | 'spread' | 'nodeIndexes' | 'adminTarget' | 'primaryBinlogState' | 'save' | 'log' | 'spec'>;

/** Whether node k acknowledges semi-sync writes when it replicates (not while it is being seeded). */
export function acknowledges(s: Pick<DbState, 'seeding'>, k: number): boolean {
  return !s.seeding?.some((e) => e.node === k);
}

/**
 * Records, before its seeding begins, that node k acknowledges nothing until it has applied the
 * primary's current GTID state. A node seeded again (its agent restarted mid-seed, a new
 * placement of the same member) gets the newer position: never earlier than the control plane's.
 * Saved, so a restarted agent keeps it off. No-op outside semi_synch spread clusters.
 */
export async function holdAcks(db: SeedAckContext, k: number): Promise<void> {
  if (!db.spread || !db.semiSync) return;
  const until = await db.primaryBinlogState();
  const local = db.nodeIndexes();
  const kept = (db.state.seeding ?? []).filter((e) => e.node !== k && local.includes(e.node));
  await updateState(db, { seeding: [...kept, { node: k, until }] });
  db.log.info({ node: k, until }, 'seeding member: it acknowledges no semi-sync write until it has applied the primary\'s position');
}

/**
 * Turns node k's acknowledgements on: rpl_semi_sync_slave_enabled=ON and, when it replicates, its
 * IO thread restarted (the primary counts it in Rpl_semi_sync_master_clients from then on); then
 * the entry is dropped. Checked again first, on the server and in the desired state (the plan's
 * observation may be old): never while the control plane still marks the member seeding.
 */
export async function acknowledge(db: SeedAckContext, k: number): Promise<void> {
  const e = db.state.seeding?.find((x) => x.node === k);
  if (!e) return;
  if (k !== db.state.primary && db.nodeIndexes().includes(k)) {
    if (markedSeeding(db.spec).includes(k)) return;
    await withAdmin(await db.adminTarget(k), async (c) => {
      const pos = String((await q(c, 'SELECT @@gtid_current_pos AS p'))[0]?.p ?? '');
      if (!gtidContains(pos, e.until)) throw new Error(`node ${k} has applied ${pos || 'nothing'}, not yet ${e.until}`);
      await c.query('SET GLOBAL rpl_semi_sync_slave_enabled=ON');
      if (await replicaStatus(c)) {
        await c.query('STOP SLAVE IO_THREAD');
        await c.query('START SLAVE IO_THREAD');
      }
    });
    db.log.info({ node: k, until: e.until }, 'seeded member caught up: it acknowledges semi-sync writes');
  }
  const left = (db.state.seeding ?? []).filter((x) => x.node !== k);
  await updateState(db, { seeding: left.length > 0 ? left : undefined });
}

/**
 * Node k is marked seeding by the control plane but has no entry here (an agent that did not
 * read the mark turned it acknowledging before it was upgraded): it gets an entry (holdAcks),
 * then rpl_semi_sync_slave_enabled=OFF and, when it replicates, its IO thread restarted, so the
 * primary stops counting it. From then on it is any seeding member: on again once caught up and
 * unmarked. A node that does not answer keeps the entry, and its rejoin starts it silent.
 */
export async function holdAgain(db: SeedAckContext, k: number): Promise<void> {
  if (db.state.seeding?.some((e) => e.node === k) || !markedSeeding(db.spec).includes(k) || k === db.state.primary) return;
  await holdAcks(db, k);
  // No entry made (not a semi_synch spread cluster): turned off, nothing would turn it on again.
  if (!db.state.seeding?.some((e) => e.node === k)) return;
  await withAdmin(await db.adminTarget(k), async (c) => {
    await c.query('SET GLOBAL rpl_semi_sync_slave_enabled=OFF');
    if (await replicaStatus(c)) {
      await c.query('STOP SLAVE IO_THREAD');
      await c.query('START SLAVE IO_THREAD');
    }
  });
  db.log.warn({ node: k }, 'member marked seeding by the control plane was acknowledging: it acknowledges nothing until it is unmarked and caught up');
}
