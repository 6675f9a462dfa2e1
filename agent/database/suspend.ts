import { systemClock } from '../../lib/clock.js';
import { withAdmin } from '../mysql/admin.js';
import { promote } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { updateState } from './state.js';
import { attach } from './rejoin.js';

/** Suspend and resume (docs/agent.md §7): the nodes stop and start again with their data. */

export type SuspendContext = Pick<ClusterContext, 'state' | 'runtime' | 'nodeIndexes' | 'nodeName' | 'closeEndpoints' | 'save'>;
export type ResumeContext = Pick<ClusterContext,
  'state' | 'runtime' | 'semiSync' | 'nodeIndexes' | 'nodeSpec' | 'adminTarget' | 'primaryAddress' | 'primaryBinlogState' | 'ensureTls' | 'save' | 'refresh'
  | 'spread' | 'log'>;

/** How long a resumed replica of a spread cluster waits for its primary, on another host, to answer (wall time). */
export const SPREAD_RESUME_WAIT_MS = 60_000;

export async function suspend(db: SuspendContext): Promise<void> {
  await db.closeEndpoints();
  await Promise.all(db.nodeIndexes().map((k) => db.runtime.stop(db.nodeName(k))));
  await updateState(db, { suspended: true });
}

/** Starts the nodes again and restores their roles in the same action (no degraded flap). */
export async function resume(db: ResumeContext): Promise<void> {
  const s = db.state;
  await db.ensureTls();
  if (db.spread) return resumeSpread(db);
  await Promise.all(db.nodeIndexes().map((k) => db.runtime.ensure(db.nodeSpec(k))));
  await withAdmin(await db.adminTarget(s.primary), (c) => promote(c, db.semiSync));
  for (const k of db.nodeIndexes().filter((i) => i !== s.primary)) await attach(db, k);
  await updateState(db, { suspended: false });
  await db.refresh();
}

/**
 * A member agent of a cluster spread over hosts (docs/multi-host.md, "Suspend and resume across
 * hosts") starts only its own members, all read-only (config-render.ts). The primary stays the
 * one the control plane names: a local one is made writable here, as on one host, unless fenced
 * (it held the position it was named for when it stopped). A local
 * replica is pointed at that primary as soon as it answers, which may be a while: its agent
 * resumes it at about the same time on another host. A replica attached here never goes through
 * the rejoin's failure count, so a primary slow to start does not get a replica rebuilt. If the
 * primary does not answer in SPREAD_RESUME_WAIT_MS (its host is gone, it cannot start), the
 * replicas are left to the plan's rejoin once the control plane names another primary.
 */
async function resumeSpread(db: ResumeContext): Promise<void> {
  const s = db.state;
  await Promise.all(db.nodeIndexes().map((k) => db.runtime.ensure(db.nodeSpec(k))));
  // The named primary, when it is local, is writable again in the same action (no `failed` flap
  // between the start and the next round), unless a planned switchover fenced it.
  if (db.nodeIndexes().includes(s.primary) && s.fencedTerm === undefined) await withAdmin(await db.adminTarget(s.primary), (c) => promote(c, db.semiSync));
  await updateState(db, { suspended: false });
  const end = systemClock.now() + SPREAD_RESUME_WAIT_MS;
  for (const k of db.nodeIndexes().filter((i) => i !== s.primary)) {
    for (;;) {
      if (k === s.primary) break;
      const answered = await db.primaryBinlogState().then(() => true, () => false);
      if (answered) {
        await attach(db, k);
        break;
      }
      if (systemClock.now() > end) {
        db.log.warn({ node: k, primary: s.primary }, 'the primary did not answer after the resume; the replica rejoins once it does');
        break;
      }
      await systemClock.sleep(250);
    }
  }
  await db.refresh();
}
