import { ensureReplicationUser } from '../mysql/accounts.js';
import { globalStatus, secureRoot, withAdmin } from '../mysql/admin.js';
import { configureReplica, gtidCurrentPos, promote, waitForGtid } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { NODE_PORT, updateState } from './state.js';

export type ProvisionContext = Pick<ClusterContext,
  'spec' | 'state' | 'log' | 'runtime' | 'semiSync' | 'spread' | 'nodeIndexes' | 'nodeName' | 'nodeSpec' | 'adminTarget' | 'resolveEngine'
  | 'allocateAddresses' | 'ensureTls' | 'save' | 'wait' | 'syncAccounts' | 'refresh' | 'seed'>;

/**
 * Builds the database (docs/agent.md §3): addresses, TLS, every node started in parallel and
 * secured, node 1 promoted, the replicas attached (and, for semi_synch, acknowledging), linroot,
 * the replicas caught up, the members' PROXY sources; then the state says `provisioned`. Safe to
 * run again after a failure: every step is idempotent.
 */
export async function provision(db: ProvisionContext): Promise<void> {
  const d = db.spec;
  if (!d.hostPrimary || !d.hostSecondary) throw new Error('the control plane assigned no endpoint addresses');
  if (db.spread) return provisionLocalMembers(db);
  const started = Date.now();
  const s = db.state;
  await updateState(db, {
    ...(s.addresses.length !== d.clusterSize ? { addresses: await db.allocateAddresses(d.clusterSize) } : {}),
    ...(!s.running.binary && !s.running.image ? { running: db.resolveEngine() } : {}),
    desired: d,
  });
  await db.ensureTls();
  const ks = db.nodeIndexes();
  const step = (name: string) => db.log.debug({ step: name, ms: Date.now() - started }, 'provision step');
  step('tls');
  if (s.forkSeeding) {
    // A fork whose seeding began before (an agent killed mid-fork, or a failed try) may hold any
    // part of its source's data, accounts and GTID state, on some nodes and not others: its nodes
    // start over from empty data directories, so the retry is a fresh fork (docs/agent.md §6).
    db.log.warn({ nodes: ks }, 'fork: an earlier seeding did not finish; starting the nodes over');
    await Promise.all(ks.map((k) => db.runtime.remove(db.nodeName(k), { withData: true })));
    step('fork nodes reset');
  }
  await Promise.all(ks.map((k) => db.runtime.ensure(db.nodeSpec(k))));
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
    await db.wait(async () =>
      withAdmin(await db.adminTarget(p), async (c) => Number(await globalStatus(c, 'Rpl_semi_sync_master_clients')) >= replicas.length), 15_000);
  }
  step('replicas attached');
  // A fork gets its source's data as of the restore second before anyone can connect.
  if (Number(d.forkSource ?? 0) > 0) {
    await updateState(db, { forkSeeding: true });
    await db.seed();
    step('fork seeded');
  }
  await db.syncAccounts();
  step('accounts');
  const pos = await withAdmin(await db.adminTarget(p), async (c) => gtidCurrentPos(c));
  await Promise.all(replicas.map(async (k) => withAdmin(await db.adminTarget(k), (c) => waitForGtid(c, pos, 15))));
  step('replicas caught up');
  await db.refresh();
  await updateState(db, { provisioned: true, forkSeeding: undefined, error: undefined });
  db.log.info({ ms: Date.now() - started, nodes: ks.length }, 'provisioned');
}

/**
 * This agent's part of a cluster spread over agents (docs/databases.md, "Clusters across hosts"):
 * addresses from its node pool for its own members only, the control plane's CA and replication
 * password, its members started and secured. The member the control plane names primary is made
 * writable (semi-sync off until the plan switches it on: linroot must be written before any replica
 * can know where to connect) and gets linroot; the other members become replicas once the
 * primary's address is known (the plan's rejoin, over the network with TLS).
 */
async function provisionLocalMembers(db: ProvisionContext): Promise<void> {
  const d = db.spec;
  const s = db.state;
  if (!d.replicationPassword || !d.clusterCaPem) throw new Error('the control plane sent no CA or replication password for this cluster spread over agents');
  const local = db.nodeIndexes();
  const addresses = [...s.addresses];
  while (addresses.length < d.clusterSize) addresses.push('');
  const missing = local.filter((k) => !addresses[k - 1]);
  if (missing.length > 0) {
    const got = await db.allocateAddresses(missing.length);
    missing.forEach((k, i) => (addresses[k - 1] = got[i]!));
  }
  await updateState(db, {
    addresses,
    replPassword: d.replicationPassword,
    ...(d.primaryMember > 0 && s.term === undefined ? { primary: d.primaryMember, term: Number(d.term) } : {}),
    ...(!s.running.binary && !s.running.image ? { running: db.resolveEngine() } : {}),
    desired: d,
  });
  await db.ensureTls();
  await Promise.all(local.map((k) => db.runtime.ensure(db.nodeSpec(k))));
  await Promise.all(local.map(async (k) => {
    const t = await db.adminTarget(k);
    await secureRoot(t.socketPath, s.adminPassword);
    await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
  }));
  if (local.includes(s.primary)) {
    await withAdmin(await db.adminTarget(s.primary), (c) => promote(c, false));
    await db.syncAccounts();
  }
  await db.refresh();
  await updateState(db, { provisioned: true, error: undefined });
  db.log.info({ members: local, primary: s.primary }, 'provisioned the local members of a cluster spread over agents');
}
