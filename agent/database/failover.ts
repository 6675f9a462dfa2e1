import { q, withAdmin, type AdminTarget } from '../mysql/admin.js';
import { failover as promoteBestReplica, SWITCHOVER_LOCK_WAIT_S } from '../mysql/promotion.js';
import { gtidCurrentPos, promote, replicaStatus, waitForGtid } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { updateState } from './state.js';
import { errantGtids } from './errant.js';

/**
 * The primary's troubles (docs/agent.md §7): a primary that came back read-only is made
 * writable, a stopped one with no replica to take over is restarted, and a dead one with live
 * replicas is replaced by the most advanced of them.
 */

export type PrimaryContext = Pick<ClusterContext, 'state' | 'runtime' | 'semiSync' | 'nodeName' | 'nodeSpec' | 'adminTarget' | 'ensureTls'>;
export type FailoverContext = Pick<ClusterContext, 'state' | 'log' | 'runtime' | 'semiSync' | 'nodeName' | 'clusterNode' | 'save' | 'refresh' | 'emit'>;

/** Makes the primary writable (it starts read-only after any restart). */
export async function promotePrimary(db: Pick<PrimaryContext, 'state' | 'semiSync' | 'adminTarget'>): Promise<void> {
  await withAdmin(await db.adminTarget(db.state.primary), async (c) => {
    // A replica the control plane named primary first applies what it has received (as a
    // failover does): every acknowledged transaction is in its relay log.
    const rs = await replicaStatus(c);
    if (rs?.gtidIoPos) await waitForGtid(c, rs.gtidIoPos, 5);
    // A fence (a planned switchover's) holds until the control plane lifts it: nothing makes the
    // fenced primary writable meanwhile, or it would take writes past the position the fence
    // answered, which the new primary lacks.
    if (db.state.fencedTerm !== undefined) return;
    await promote(c, db.semiSync);
  });
}

/**
 * Fences a primary for a planned switchover: read-only (MariaDB waits for the commits in flight,
 * which under semi-sync are acknowledged first; linroot has no READ_ONLY ADMIN, so no client
 * commits after this), then its GTID position, final from then on. Returns gtid_binlog_pos.
 */
export async function fencePrimary(t: AdminTarget): Promise<string> {
  return withAdmin(t, async (c) => {
    // As in a switchover on one host: a global read lock someone holds fails the fence after
    // a few seconds (the control plane abandons and retries it) instead of holding the writes.
    await c.query(`SET SESSION lock_wait_timeout=${SWITCHOVER_LOCK_WAIT_S}`);
    await c.query('SET GLOBAL read_only=ON');
    const rows = await q(c, 'SELECT @@gtid_binlog_pos AS pos');
    return String(rows[0]?.pos ?? '');
  });
}

export async function restartPrimary(db: PrimaryContext): Promise<void> {
  const s = db.state;
  await db.ensureTls();
  await db.runtime.ensure(db.nodeSpec(s.primary));
  // A primary fenced for a planned switchover stays read-only (it starts so): made writable here,
  // it would take writes past the position its fence answered, which the new primary lacks.
  if (s.fencedTerm !== undefined) return;
  await promotePrimary(db);
}

/**
 * Replaces a dead primary: fences it, promotes the most advanced of the `alive` replicas (the
 * others follow it) and marks the old primary for a rebuild. `oldGtid` is the last position the
 * old primary was seen at: transactions in it that the new primary lacks are errant and are
 * reported (event and log, with their GTIDs) before the rebuild replaces that node's data.
 * Returns the new primary's index.
 */
export async function failover(db: FailoverContext, alive: number[], oldGtid = ''): Promise<number> {
  const s = db.state;
  const old = s.primary;
  // Fence first: a primary that is merely hung must not wake up writable next to the new one.
  await db.runtime.kill(db.nodeName(old)).catch(() => undefined);
  const winner = await promoteBestReplica(await Promise.all(alive.map((k) => db.clusterNode(k))), s.replPassword, db.semiSync, db.log);
  await updateState(db, { primary: winner, rebuild: s.rebuild.includes(old) ? s.rebuild : [...s.rebuild, old] });
  await db.refresh();
  db.emit('database_failover', `primary node ${old} (${s.addresses[old - 1]}) failed; node ${winner} (${s.addresses[winner - 1]}) promoted`);
  await reportErrant(db, old, winner, oldGtid);
  return winner;
}

/**
 * Errant transactions of the old primary: committed there, never received by the new primary
 * (written while no replica acknowledged, or in the instant of the crash). Never dropped in
 * silence: an event on the database and an error log name them before the rebuild.
 */
async function reportErrant(db: FailoverContext, old: number, winner: number, oldGtid: string): Promise<void> {
  if (!oldGtid) return;
  let newGtid: string;
  try {
    newGtid = await withAdmin((await db.clusterNode(winner)).admin, gtidCurrentPos);
  } catch (err) {
    db.log.warn({ err, node: winner }, 'new primary position unreadable; errant transactions not checked');
    return;
  }
  const errant = errantGtids(oldGtid, newGtid);
  if (errant.length === 0) return;
  db.log.error({ node: old, errant, oldPosition: oldGtid, newPrimary: winner, newPosition: newGtid }, 'errant transactions on the old primary');
  await updateState(db, { errant: { node: old, gtids: errant, after: newGtid } });
  db.emit('database_failover', `errant transactions: node ${old} had GTIDs ${errant.join(', ')} that the new primary (node ${winner}, at ${newGtid}) never received; they are not in the database any more: their binlog events are saved in the agent's state folder (errant/) before node ${old} is rebuilt from the new primary`, 'failed');
}
