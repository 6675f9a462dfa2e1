import { rm } from 'node:fs/promises';
import { join } from 'node:path';
import { allocateAddresses } from './address-pool.js';
import { NODE_PORT, newDbState } from './database-state.js';
import type { DatabaseController } from './database-controller.js';
import { failover, switchover } from './failover/promotion.js';
import { seedFromDump } from './failover/seed-replica.js';
import { ensureReplicationUser } from './mysql/accounts.js';
import { globalStatus, secureRoot, withAdmin } from './mysql/admin.js';
import { BinlogPurgedError, configureReplica, gtidCurrentPos, gtidSeq, promote, replicaStatus, waitForGtid } from './mysql/replication.js';
import { LABEL_AGENT, LABEL_DATABASE } from './runtime/container-runtime.js';

/**
 * The cluster actions a DatabaseController executes (one at a time, under its lock): building,
 * healing, rolling restarts, failover, suspend/resume and removal of one database's nodes.
 * See docs/agent.md §3, §5 and §7.
 */

export async function provision(db: DatabaseController): Promise<void> {
  const d = db.desired!;
  if (!d.hostPrimary || !d.hostSecondary) throw new Error('the control plane assigned no endpoint addresses');
  const started = Date.now();
  if (!db.state) db.state = newDbState(db.id);
  const s = db.state;
  if (s.addresses.length !== d.clusterSize) {
    s.addresses = await allocateAddresses(db.deps.nodeAddressPool, d.clusterSize, db.deps.takenAddresses());
  }
  if (!s.running.binary && !s.running.image) s.running = db.resolveTarget();
  s.desired = d;
  await db.save();
  await db.ensureTls();
  const ks = db.nodeIndexes();
  const step = (name: string) => db.log.debug({ step: name, ms: Date.now() - started }, 'provision step');
  step('tls');
  await Promise.all(ks.map((k) => db.deps.runtime.ensure(db.nodeSpec(k))));
  step('nodes started');
  await Promise.all(
    ks.map(async (k) => {
      const t = await db.adminTarget(k);
      await secureRoot(t.socketPath, s.adminPassword);
      await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
    }),
  );
  step('secured');
  const p = s.primary;
  await withAdmin(await db.adminTarget(p), (c) => promote(c, db.semiSync));
  const replicas = ks.filter((k) => k !== p);
  await Promise.all(replicas.map(async (k) => withAdmin(await db.adminTarget(k), (c) =>
    configureReplica(c, { primaryHost: s.addresses[p - 1]!, primaryPort: NODE_PORT, password: s.replPassword }))));
  if (replicas.length > 0 && d.replicationType === 'semi_synch') {
    // Writes on a semi-sync primary wait for an ack; make sure replicas are attached first.
    await db.waitUntil(async () =>
      withAdmin(await db.adminTarget(p), async (c) => Number(await globalStatus(c, 'Rpl_semi_sync_master_clients')) >= replicas.length), 15_000);
  }
  step('replicas attached');
  await db.syncAccounts();
  step('accounts');
  const pos = await withAdmin(await db.adminTarget(p), async (c) => gtidCurrentPos(c));
  await Promise.all(replicas.map(async (k) => withAdmin(await db.adminTarget(k), (c) => waitForGtid(c, pos, 15))));
  step('replicas caught up');
  await db.observe();
  await db.syncProxies();
  s.provisioned = true;
  s.error = undefined;
  await db.save();
  db.log.info({ ms: Date.now() - started, nodes: ks.length }, 'provisioned');
}

/**
 * Removes everything of the database: proxies, every node labelled with it (with data), its
 * folder and its backups. Idempotent; on failure the database stays known so the next round
 * retries.
 */
export async function remove(db: DatabaseController): Promise<void> {
  db.deleted = true;
  try {
    await db.closeProxies();
    const names = new Set(db.nodeIndexes().map((k) => db.nodeName(k)));
    for (const n of await db.deps.runtime.list({ [LABEL_AGENT]: db.deps.agentId, [LABEL_DATABASE]: String(db.id) })) names.add(n.name);
    await Promise.all([...names].map((n) => db.deps.runtime.remove(n, { withData: true })));
    await rm(db.dir, { recursive: true, force: true });
    await rm(join(db.deps.stateDir, 'backups', String(db.id)), { recursive: true, force: true });
  } catch (err) {
    db.deleted = false;
    throw err;
  }
  db.state = undefined;
  db.log.info('deleted');
}

export async function suspend(db: DatabaseController): Promise<void> {
  await db.closeProxies();
  await Promise.all(db.nodeIndexes().map((k) => db.deps.runtime.stop(db.nodeName(k))));
  db.state!.suspended = true;
  await db.save();
}

/** Starts the nodes again and restores their roles in the same action (no degraded flap). */
export async function resume(db: DatabaseController): Promise<void> {
  const s = db.state!;
  await db.ensureTls();
  await Promise.all(db.nodeIndexes().map((k) => db.deps.runtime.ensure(db.nodeSpec(k))));
  await withAdmin(await db.adminTarget(s.primary), (c) => promote(c, db.semiSync));
  for (const k of db.nodeIndexes().filter((i) => i !== s.primary)) await attach(db, k);
  s.suspended = false;
  await db.save();
  await db.observe();
  await db.syncProxies();
}

export async function restartPrimary(db: DatabaseController): Promise<void> {
  const p = db.state!.primary;
  await db.ensureTls();
  await db.deps.runtime.ensure(db.nodeSpec(p));
  await withAdmin(await db.adminTarget(p), (c) => promote(c, db.semiSync));
}

export async function doFailover(db: DatabaseController): Promise<void> {
  const s = db.state!;
  const old = s.primary;
  // Fence first: a primary that is merely hung must not wake up writable next to the new one.
  await db.deps.runtime.kill(db.nodeName(old)).catch(() => undefined);
  const alive = db.details.filter((n) => n.index !== old && n.state === 'running' && n.reachable);
  const winner = await failover(await Promise.all(alive.map((n) => db.clusterNode(n.index))), s.replPassword, db.semiSync, db.log);
  s.primary = winner;
  if (!s.rebuild.includes(old)) s.rebuild.push(old);
  await db.save();
  db.primaryDown = 0;
  await db.observe();
  await db.syncProxies();
  db.emit('database_failover', `primary node ${old} (${s.addresses[old - 1]}) failed; node ${winner} (${s.addresses[winner - 1]}) promoted`);
}

export async function rejoin(db: DatabaseController, k: number, rebuildIn: boolean): Promise<void> {
  const s = db.state!;
  const rebuild = rebuildIn || (db.rejoinFailures.get(k) ?? 0) >= 3;
  await db.ensureTls();
  const name = db.nodeName(k);
  if (rebuild) {
    // Replaying the primary's binlog from the first GTID rebuilds the node exactly: the binlog
    // holds the whole history (nothing is purged for expire_logs_days).
    await db.deps.runtime.remove(name, { withData: true });
  }
  await db.deps.runtime.ensure(db.nodeSpec(k));
  const t = await db.adminTarget(k);
  if (rebuild) {
    await secureRoot(t.socketPath, s.adminPassword);
    await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
  }
  let seeded = false;
  try {
    await attach(db, k);
  } catch (err) {
    if (!(rebuild && err instanceof BinlogPurgedError)) throw err;
    db.log.info({ node: k }, 'primary binlog purged; seeding the node from a dump');
    const d = db.desired ?? s.desired!;
    await seedFromDump({
      runtime: db.deps.runtime,
      source: { name: db.nodeName(s.primary), admin: await db.adminTarget(s.primary) },
      target: { name, admin: t },
      adminPassword: s.adminPassword,
      allowList: d.allowList,
      linrootPassword: db.pendingPassword ?? d.rootPassword,
    });
    await attach(db, k);
    seeded = true;
  }
  s.rebuild = s.rebuild.filter((i) => i !== k);
  db.rejoinFailures.delete(k);
  await db.save();
  await db.observe();
  await db.syncProxies();
  if (rebuild) db.emit('database_update', `node ${k} rebuilt${seeded ? ' from a dump of the primary' : ''} and rejoined as a replica`);
}

/**
 * Points node k at the current primary and waits until both replication threads run. Fails
 * at once (BinlogPurgedError) when the primary no longer has the binlog the node needs.
 */
export async function attach(db: DatabaseController, k: number): Promise<void> {
  const s = db.state!;
  const t = await db.adminTarget(k);
  const target = gtidSeq(await withAdmin(await db.adminTarget(s.primary), (c) => gtidCurrentPos(c)));
  await withAdmin(t, (c) => configureReplica(c, { primaryHost: db.primaryAddress(), primaryPort: NODE_PORT, password: s.replPassword }));
  // Both threads show "Yes" for a moment before the primary answers a request for purged
  // binlog with error 1236, so a node counts as attached once it has caught up with the
  // primary's position at attach time, or has kept replicating without error for 2 s.
  const end = Date.now() + 30_000;
  let runningSince = 0;
  for (;;) {
    const st = await withAdmin(t, async (c) => ({ rs: await replicaStatus(c), pos: gtidSeq(await gtidCurrentPos(c)) })).catch(() => undefined);
    const rs = st?.rs;
    if (rs && /\b1236\b/.test(rs.lastError)) throw new BinlogPurgedError(rs.lastError);
    if (rs?.ioRunning && rs.sqlRunning) {
      runningSince ||= Date.now();
      if (st!.pos >= target || Date.now() - runningSince >= 2000) return;
    } else {
      runningSince = 0;
    }
    if (Date.now() > end) throw new Error(`node ${k} does not replicate: ${rs?.lastError || 'replication threads not running'}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

/**
 * Restarts every node with its current spec (resize) or the new binary/image (patch):
 * replicas one at a time, then a switchover, then the old primary. A 1-node database simply
 * restarts (downtime).
 */
export async function rolling(db: DatabaseController, reason: 'resize' | 'patch'): Promise<void> {
  const s = db.state!;
  if (reason === 'patch') {
    s.running = db.resolveTarget();
    await db.save();
  }
  await db.ensureTls();
  const restart = async (k: number) => {
    await db.deps.runtime.stop(db.nodeName(k));
    await db.deps.runtime.ensure(db.nodeSpec(k));
  };
  const p = s.primary;
  if (db.clusterSize === 1) {
    await restart(p);
    await withAdmin(await db.adminTarget(p), (c) => promote(c, db.semiSync));
  } else {
    const replicas = db.nodeIndexes().filter((k) => k !== p);
    for (const k of replicas) {
      await restart(k);
      const t = await db.adminTarget(k);
      await attach(db, k);
      const pos = await withAdmin(await db.adminTarget(p), (c) => gtidCurrentPos(c));
      await withAdmin(t, (c) => waitForGtid(c, pos, 30));
    }
    const target = replicas[0]!;
    await switchover(await db.clusterNode(p), await db.clusterNode(target), await Promise.all(replicas.slice(1).map(db.clusterNode)), s.replPassword, db.semiSync);
    s.primary = target;
    await db.save();
    await db.observe();
    await db.syncProxies();
    await restart(p);
    await attach(db, p);
  }
  await db.observe();
  await db.syncProxies();
  if (reason === 'patch') {
    db.emit('database_update', `patched: nodes restarted with ${s.running.binary ?? s.running.image}`);
    db.patchRequested?.resolve();
    db.patchRequested = undefined;
  }
}
