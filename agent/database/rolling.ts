import { systemClock } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import { sameSpec } from '../runtime/container-runtime.js';
import { withAdmin } from '../mysql/admin.js';
import { clientError } from '../mysql/customer-data.js';
import { switchover } from '../mysql/promotion.js';
import { gtidCurrentPos, promote, waitForGtid } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import type { NodeObs } from './plan.js';
import { updateState } from './state.js';
import { attach } from './rejoin.js';

export type RollingContext = Pick<ClusterContext,
  'spec' | 'state' | 'log' | 'runtime' | 'semiSync' | 'nodeIndexes' | 'nodeName' | 'nodeSpec' | 'adminTarget' | 'clusterNode'
  | 'primaryAddress' | 'primaryBinlogState' | 'resolveEngine' | 'ensureTls' | 'save' | 'refresh' | 'emit'>;

/**
 * Restarts every node with its current spec (resize) or the new binary/image (patch):
 * replicas one at a time, each caught up before the next, then a switchover, then the old
 * primary. A 1-node database simply restarts (downtime). See docs/agent.md §5 and §7.
 */
export async function rolling(db: RollingContext, reason: 'resize' | 'patch'): Promise<void> {
  const s = db.state;
  // A patch, or a version upgrade (the desired version is not the one running): the nodes come
  // back on the desired engine build.
  if (reason === 'patch' || (db.spec.version && db.spec.version !== s.running.version)) {
    await updateState(db, { running: db.resolveEngine() });
  }
  await db.ensureTls();
  const restart = async (k: number) => {
    await db.runtime.stop(db.nodeName(k));
    await db.runtime.ensure(db.nodeSpec(k));
    await upgradeTables(db, k);
    // Observed again at once, so the next report carries the restarted member's state rather than
    // the one seen before its restart. The data planes' addresses for PROXY headers are in its
    // option file from the start (node-spec.ts); the SET GLOBAL that refresh() also runs only
    // repeats them here (before they were in the file, this call was what ended the refusals).
    await db.refresh();
  };
  const p = s.primary;
  const nodes = db.nodeIndexes();
  if (nodes.length === 1) {
    await restart(p);
    await withAdmin(await db.adminTarget(p), (c) => promote(c, db.semiSync));
  } else {
    const replicas = nodes.filter((k) => k !== p);
    for (const k of replicas) {
      await restart(k);
      const t = await db.adminTarget(k);
      await attach(db, k);
      const pos = await withAdmin(await db.adminTarget(p), (c) => gtidCurrentPos(c));
      await withAdmin(t, (c) => waitForGtid(c, pos, 30));
    }
    const target = replicas[0]!;
    // Logged both ends: a switchover that never ends shows where the rolling restart stopped.
    db.log.info({ from: p, to: target }, 'switchover started');
    await switchover(await db.clusterNode(p), await db.clusterNode(target), await Promise.all(replicas.slice(1).map((k) => db.clusterNode(k))), s.replPassword, db.semiSync);
    await updateState(db, { primary: target });
    db.log.info({ primary: target }, 'switchover done');
    await db.refresh();
    await restart(p);
    await attach(db, p);
  }
  await db.refresh();
  if (reason === 'patch') db.emit('database_update', `patched: nodes restarted with ${s.running.binary ?? s.running.image}`);
}

/**
 * One member's step of a rolling change of a cluster spread over hosts (RestartMemberOp,
 * docs/multi-host.md "Rolling changes across hosts"): the control plane sequences the members and
 * the switchover; this agent only restarts its local replica `k` with the desired spec and engine
 * and returns once it replicates from the named primary again. A member that already runs the
 * desired spec and engine is left alone, so a rollout resumed after a failure skips it. Returns
 * whether it restarted the member. A patch's step (`patch`) restarts it on the catalogue's build
 * whatever it runs: the control plane's rollout keeps which members it restarted already.
 */
export async function restartMember(db: RollingContext, k: number, patch = false): Promise<boolean> {
  const s = db.state;
  if (!db.nodeIndexes().includes(k)) throw new FulcrumError('conflict', `member ${k} does not run on this agent`);
  // The primary is switched over first: restarting it would refuse writes for the whole restart.
  if (k === s.primary) throw new FulcrumError('conflict', `member ${k} is the primary; it is restarted only once another member is primary`);
  const upgrade = !!db.spec.version && db.spec.version !== s.running.version;
  // A patch, like an upgrade, moves the member to the build the catalogue names now.
  if (upgrade || patch) await updateState(db, { running: db.resolveEngine() });
  await db.ensureTls();
  const st = await db.runtime.inspect(db.nodeName(k));
  // A patch restarts even an unchanged spec (the control plane's rollout restarts each member once).
  if (!upgrade && !patch && st.state === 'running' && st.spec && sameSpec(st.spec, db.nodeSpec(k))) return false;
  db.log.info({ node: k, upgrade, patch }, 'restarting the member for a rolling change');
  await db.runtime.stop(db.nodeName(k));
  await db.runtime.ensure(db.nodeSpec(k));
  await upgradeTables(db, k);
  await attach(db, k);
  await db.refresh();
  return true;
}

/** How long a member's restart for a rolling change waits for it to replicate first (wall time). */
export const REPLICATING_WAIT_MS = 60_000;

/**
 * Resolves once member `k` was last observed a running, read-only replica replicating from the
 * primary (`isReplica`: the agent does not run it as primary). A switched-over old primary is
 * reported a replica as soon as the new term arrives, before its rejoin (the errant check, then
 * replication from its whole position) has run; restarted and attached before that, it would
 * replicate from a stale position. Waits on the reconcile rounds' observations, at most
 * REPLICATING_WAIT_MS, then fails with a conflict (the control plane retries the rollout).
 */
export async function untilReplicating(node: () => NodeObs | undefined, isReplica: () => boolean, k: number): Promise<void> {
  const end = systemClock.now() + REPLICATING_WAIT_MS;
  for (;;) {
    const n = node();
    if (isReplica() && n?.state === 'running' && n.reachable && n.readOnly && n.replicating) return;
    if (systemClock.now() > end) throw new FulcrumError('conflict', `member ${k} did not replicate from the primary within ${REPLICATING_WAIT_MS / 1000} s`);
    await systemClock.sleep(200);
  }
}

/**
 * Brings node k's system tables to the server it now runs (`mariadb-upgrade`), before it
 * replicates or serves: a new major version reads the old tables but changes some of them
 * (docs/agent.md §7, "Upgrades"). It does nothing when the data dir already matches the server
 * (it keeps a marker file there), so it runs after every restart of a rolling one, which also
 * covers a rolling restart interrupted half way. Nothing it does is written to the binlog, so
 * replicas upgraded first never get GTIDs of their own. Only the system schema is upgraded: a
 * check of every customer table would hold each node for as long as its data takes to read,
 * and InnoDB tables need no conversion between the series the catalogue offers.
 */
async function upgradeTables(db: Pick<RollingContext, 'runtime' | 'nodeName' | 'state' | 'log'>, k: number): Promise<void> {
  const started = Date.now();
  const r = await db.runtime.exec(db.nodeName(k), ['mariadb-upgrade', '--user=root', '--skip-write-binlog', '--upgrade-system-tables', '--silent'], { env: { MYSQL_PWD: db.state.adminPassword } });
  // An image without the tool (MySQL's own images: MySQL 8 upgrades its tables itself at start).
  if (r.exitCode === 126 || r.exitCode === 127) {
    db.log.warn({ node: k }, 'no mariadb-upgrade in this engine build; system tables left as the server found them');
    return;
  }
  if (r.exitCode !== 0) throw new Error(`mariadb-upgrade failed on node ${k}: ${clientError(r.stderr || r.stdout)}`);
  db.log.info({ node: k, ms: Date.now() - started }, 'system tables match the server');
}
