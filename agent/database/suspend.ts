import { withAdmin } from '../mysql/admin.js';
import { promote } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { updateState } from './state.js';
import { attach } from './rejoin.js';

/** Suspend and resume (docs/agent.md §7): the nodes stop and start again with their data. */

export type SuspendContext = Pick<ClusterContext, 'state' | 'runtime' | 'nodeIndexes' | 'nodeName' | 'closeEndpoints' | 'save'>;
export type ResumeContext = Pick<ClusterContext,
  'state' | 'runtime' | 'semiSync' | 'nodeIndexes' | 'nodeSpec' | 'adminTarget' | 'primaryAddress' | 'primaryBinlogState' | 'ensureTls' | 'save' | 'refresh'>;

export async function suspend(db: SuspendContext): Promise<void> {
  await db.closeEndpoints();
  await Promise.all(db.nodeIndexes().map((k) => db.runtime.stop(db.nodeName(k))));
  await updateState(db, { suspended: true });
}

/** Starts the nodes again and restores their roles in the same action (no degraded flap). */
export async function resume(db: ResumeContext): Promise<void> {
  const s = db.state;
  await db.ensureTls();
  await Promise.all(db.nodeIndexes().map((k) => db.runtime.ensure(db.nodeSpec(k))));
  await withAdmin(await db.adminTarget(s.primary), (c) => promote(c, db.semiSync));
  for (const k of db.nodeIndexes().filter((i) => i !== s.primary)) await attach(db, k);
  await updateState(db, { suspended: false });
  await db.refresh();
}
