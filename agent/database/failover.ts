import { withAdmin } from '../mysql/admin.js';
import { failover as promoteBestReplica } from '../mysql/promotion.js';
import { promote } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';

/**
 * The primary's troubles (docs/agent.md §7): a primary that came back read-only is made
 * writable, a stopped one with no replica to take over is restarted, and a dead one with live
 * replicas is replaced by the most advanced of them.
 */

export type PrimaryContext = Pick<ClusterContext, 'state' | 'runtime' | 'semiSync' | 'nodeName' | 'nodeSpec' | 'adminTarget' | 'ensureTls'>;
export type FailoverContext = Pick<ClusterContext, 'state' | 'log' | 'runtime' | 'semiSync' | 'nodeName' | 'clusterNode' | 'save' | 'refresh' | 'emit'>;

/** Makes the primary writable (it starts read-only after any restart). */
export async function promotePrimary(db: Pick<PrimaryContext, 'state' | 'semiSync' | 'adminTarget'>): Promise<void> {
  await withAdmin(await db.adminTarget(db.state.primary), (c) => promote(c, db.semiSync));
}

export async function restartPrimary(db: PrimaryContext): Promise<void> {
  const p = db.state.primary;
  await db.ensureTls();
  await db.runtime.ensure(db.nodeSpec(p));
  await promotePrimary(db);
}

/**
 * Replaces a dead primary: fences it, promotes the most advanced of the `alive` replicas (the
 * others follow it) and marks the old primary for a rebuild. Returns the new primary's index.
 */
export async function failover(db: FailoverContext, alive: number[]): Promise<number> {
  const s = db.state;
  const old = s.primary;
  // Fence first: a primary that is merely hung must not wake up writable next to the new one.
  await db.runtime.kill(db.nodeName(old)).catch(() => undefined);
  const winner = await promoteBestReplica(await Promise.all(alive.map((k) => db.clusterNode(k))), s.replPassword, db.semiSync, db.log);
  s.primary = winner;
  if (!s.rebuild.includes(old)) s.rebuild.push(old);
  await db.save();
  await db.refresh();
  db.emit('database_failover', `primary node ${old} (${s.addresses[old - 1]}) failed; node ${winner} (${s.addresses[winner - 1]}) promoted`);
  return winner;
}
