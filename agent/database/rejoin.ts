import { createWriteStream } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { systemClock } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import { ensureReplicationUser } from '../mysql/accounts.js';
import { q, secureRoot, withAdmin } from '../mysql/admin.js';
import { clientError } from '../mysql/customer-data.js';
import { BinlogPurgedError, configureReplica, gtidCurrentPos, gtidSeq, replicaStatus } from '../mysql/replication.js';
import type { ClusterContext, MemberSeed } from './context.js';
import { divergedFromPrimary } from './diverged.js';
import { seedAfterPurge, seedFromLocalDump, seedFromPrimaryCopy, type CopySeed } from './dump-seed.js';
import { namedPrimaryAhead } from './plan.js';
import { acknowledges, holdAcks } from './seed-ack.js';
import { NODE_PORT, updateState } from './state.js';

/**
 * Everything that makes a node a replica of the current primary: attaching it, rejoining a node
 * that stopped replicating, and seeding a rebuilt node: a member of a cluster spread over agents
 * from the store's newest physical base (agent/binlog/member-seed.ts), else by binlog replay or,
 * on one host when the primary has purged the binlog, from a dump (docs/agent.md §7, §8).
 */

export type AttachContext = Pick<ClusterContext, 'state' | 'semiSync' | 'adminTarget' | 'primaryAddress' | 'primaryBinlogState'>;
export type RejoinContext = AttachContext & Pick<ClusterContext,
  'log' | 'nodeIndexes' | 'runtime' | 'spec' | 'dir' | 'nodeName' | 'nodeSpec' | 'ensureTls' | 'linrootPassword' | 'save' | 'refresh' | 'emit' | 'spread' | 'primaryReadOnly' | 'remotePrimary'>;

/**
 * A rebuilt member that no way of seeding can bring back now: reported as a failed event (once
 * per reason, not once per retry: DbState.unseeded) and the plan keeps retrying the rejoin.
 */
export class SeedUnavailableError extends Error {}

/**
 * Seeds member k from the newest physical base of the database in a shared object store
 * (agent/binlog/member-seed.ts, through the agent's day-two services); undefined when the agent
 * has none.
 */
export type MemberSeeder = (k: number) => Promise<MemberSeed> | undefined;

/**
 * Brings node k back as a replica. `rebuild` (an old primary, a missing node, or one that failed
 * to rejoin three times) wipes its data first; a member of a spread cluster is then seeded from
 * the store's physical base when there is one, and otherwise the node replays the primary's
 * binlog from the first GTID, or (one host) is seeded from a dump when that binlog is gone.
 */
export async function rejoin(db: RejoinContext, k: number, rebuild: boolean, seedMember?: MemberSeeder): Promise<void> {
  const s = db.state;
  await db.ensureTls();
  const name = db.nodeName(k);
  // Checked again just before a wipe: the promotion may arrive while the errant check runs.
  const notNamedPrimary = () => {
    if (db.spread && namedPrimaryAhead(db.spec, s, k)) {
      throw new FulcrumError('conflict', `node ${k} is named primary for term ${Number(db.spec.term)}: it is not made a replica of the old primary, nor wiped`);
    }
  };
  notNamedPrimary();
  // A member of a spread cluster may be an old primary coming back: fenced and checked before
  // anything follows the primary or wipes it (also before a rebuild after failed rejoins, so no
  // transaction only it has is ever dropped unreported). A check that cannot reach the primary
  // fails the rejoin; one already recorded is not made twice.
  if (db.spread && s.errant?.node !== k && (await db.runtime.inspect(name)).state !== 'missing') {
    await db.runtime.ensure(db.nodeSpec(k));
    if (await divergedFromPrimary(db, k)) rebuild = true;
  }
  if (rebuild) notNamedPrimary();
  // A member just placed here (re-placed after a host loss or a drain, or one of a new cluster)
  // runs on a data directory that has applied nothing: it is seeded as a rebuilt one is, without
  // the wipe (there is nothing to wipe).
  const fresh = db.spread && !rebuild && (await db.runtime.inspect(name)).state === 'running' && await appliedNothing(db, k);
  // Saved before anything of its seeding: it acknowledges no write until it has caught up.
  if (rebuild || fresh) await holdAcks(db, k);
  if (rebuild && s.errant?.node === k) await keepErrant(db, k);
  if (rebuild) {
    // Replaying the primary's binlog from the first GTID rebuilds the node exactly while the
    // binlog holds the whole history; dump-seed.ts covers the case where it does not.
    await db.runtime.remove(name, { withData: true });
  }
  await db.runtime.ensure(db.nodeSpec(k));
  // A rebuilt member of a spread cluster starts from the newest physical base of the database in
  // the shared object store whenever there is one, even when the primary still has its whole
  // binlog: a replay applies every row event of the database's life through the relay log (a
  // 1 GB database took 103 s), a base is copied as files and prepared (docs/performance.md,
  // "Re-placement of a 3-node member"), and only what the primary wrote since the base is
  // replicated. The primary's binlog is the fallback: no base (local folders, none taken yet,
  // another engine series) or one that could not be read or placed (the node is wiped again).
  let based: Exclude<MemberSeed, { skipped: string }> | undefined;
  let noBase = '';
  let wiped = rebuild;
  if ((rebuild || fresh) && db.spread) {
    try {
      const r = await seedMember?.(k) ?? { skipped: 'this agent has no backup store' };
      if ('skipped' in r) noBase = r.skipped;
      else based = r;
    } catch (err) {
      noBase = `the store's physical base could not be used (${(err as Error).message})`;
      db.log.warn({ err, node: k }, 'seeding the member from the store\'s physical base failed; replaying the primary\'s binlog instead');
      await db.runtime.remove(name, { withData: true });
      await db.runtime.ensure(db.nodeSpec(k));
      wiped = true;
    }
  }
  const t = await db.adminTarget(k);
  // A node seeded from the base has the database's accounts, and its init file gave root this
  // agent's password on start.
  if (wiped && !based) {
    await secureRoot(t.socketPath, s.adminPassword);
    await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
  }
  let seeded: (CopySeed & { local?: boolean }) | undefined;
  try {
    // A member of a spread cluster may have been primary (its own transactions are all on the new
    // primary, or it would be rebuilding): its whole position becomes where it replicates from.
    await attach(db, k, db.spread && !rebuild && !based);
  } catch (err) {
    if (!((rebuild || fresh) && err instanceof BinlogPurgedError)) throw err;
    const next = seedAfterPurge({ spread: db.spread, primary: db.remotePrimary(), ...(based ? { base: based } : {}) });
    if (next.way === 'none') {
      // A base's data is of no use now: the next try starts over (from a newer base).
      if (based && !s.rebuild.includes(k)) await updateState(db, { rebuild: [...s.rebuild, k] });
      await unseedable(db, k, `node ${k} cannot be seeded: ${next.why}`, err);
    }
    // From the first byte loaded until the load has ended whole, the node holds a copy that may
    // not be: marked for a rebuild (saved), so that whatever stops the copy (the agent killed, a
    // wipe that failed) the next try wipes it first instead of loading over or attaching it. A
    // mark it had already (an old primary) stays until it replicates, as before.
    const marked = !s.rebuild.includes(k);
    if (marked) await updateState(db, { rebuild: [...s.rebuild, k] });
    if (next.way === 'copy') {
      db.log.info({ node: k, noBase }, 'the primary no longer has the binlog the member needs; seeding it with a copy of the primary');
      seeded = await copyPrimary(db, k, err);
    } else {
      db.log.info({ node: k }, 'primary binlog purged; seeding the node from a dump');
      const dumped = await seedFromLocalDump({
        runtime: db.runtime,
        source: { name: db.nodeName(s.primary), admin: await db.adminTarget(s.primary) },
        target: { name, admin: t },
        adminPassword: s.adminPassword,
        allowList: db.spec.allowList,
        linrootPassword: db.linrootPassword(),
      });
      seeded = { ...dumped, local: true };
    }
    // Whole now, at its GTID position: an attach that fails is retried on this copy.
    if (marked) await updateState(db, { rebuild: s.rebuild.filter((i) => i !== k) });
    await attach(db, k);
  }
  await updateState(db, { rebuild: s.rebuild.filter((i) => i !== k), unseeded: undefined });
  await db.refresh();
  const how = seeded?.local ? ' from a dump of the primary'
    : seeded ? ` from a consistent copy of the primary over TLS (at ${seeded.gtid}, ${(seeded.ms / 1000).toFixed(1)} s)`
      : based ? ` from physical base ${based.backupId} in the object store` : '';
  const outside = seeded?.outside.length ? `; ${outsideNote(seeded.outside)}` : '';
  if (rebuild) db.emit('database_update', `node ${k} rebuilt${how} and rejoined as a replica${outside}`);
  else if (how) db.emit('database_update', `node ${k} seeded${how} and rejoined as a replica${outside}`);
}

/**
 * Said with a dump seed's event: tables outside InnoDB were copied as they were when the dump
 * read them, not at the copy's position (the snapshot covers InnoDB only), so they may differ
 * from the primary's.
 */
export function outsideNote(tables: string[]): string {
  const named = tables.slice(0, 3).join(', ');
  const more = tables.length > 3 ? ` and ${tables.length - 3} more` : '';
  return `${tables.length} table(s) not in InnoDB (${named}${more}) were copied outside the snapshot and may differ from the primary's; converting them to InnoDB avoids that`;
}

/**
 * Seeds member k, wiped or just made (attaching it applied nothing: the primary refused at once),
 * with a consistent copy of the primary on another host (dump-seed.ts). A copy that fails leaves
 * the node wiped (no half-loaded data stays) and fails the rejoin, which the plan retries; the
 * reason is reported once, as the other ways' are.
 */
async function copyPrimary(db: RejoinContext, k: number, purged: unknown): Promise<CopySeed> {
  const s = db.state;
  const name = db.nodeName(k);
  const wipe = async () => {
    await db.runtime.remove(name, { withData: true });
    await db.runtime.ensure(db.nodeSpec(k));
    const t = await db.adminTarget(k);
    await secureRoot(t.socketPath, s.adminPassword);
    await withAdmin(t, (c) => ensureReplicationUser(c, s.replPassword, true));
  };
  try {
    return await seedFromPrimaryCopy({
      runtime: db.runtime, target: { name, admin: await db.adminTarget(k) }, primary: db.remotePrimary()!,
      adminPassword: s.adminPassword, allowList: db.spec.allowList, linrootPassword: db.linrootPassword(),
    });
  } catch (err) {
    db.log.warn({ err, node: k }, 'seeding the member with a copy of the primary failed; the node is wiped and the rejoin retried');
    await wipe().catch((e: unknown) => db.log.warn({ err: e, node: k }, 'wiping the node after a failed copy failed'));
    return unseedable(db, k, `node ${k} cannot be seeded: the primary on another host no longer has its whole binlog, no physical base could be used, and copying the primary failed (${(err as Error).message})`, purged);
  }
}

/** Reports why member k cannot be seeded now (once per reason: DbState.unseeded) and fails the rejoin. */
async function unseedable(db: RejoinContext, k: number, why: string, cause: unknown): Promise<never> {
  if (db.state.unseeded !== why) {
    db.emit('database_update', why, 'failed');
    await updateState(db, { unseeded: why });
  }
  throw new SeedUnavailableError(why, { cause });
}

/**
 * Whether node k has applied no transaction at all (no GTID in its binlog or replication
 * position): a member just made, whose data is what provisioning gave it.
 */
async function appliedNothing(db: RejoinContext, k: number): Promise<boolean> {
  return withAdmin(await db.adminTarget(k), async (c) => {
    const r = (await q(c, 'SELECT @@gtid_current_pos AS c, @@gtid_binlog_state AS b, @@gtid_slave_pos AS s'))[0];
    return !r?.c && !r?.b && !r?.s;
  }).catch(() => false);
}

/**
 * Saves an old primary's errant transactions before its rebuild wipes them: the node is started
 * on its own data (read-only, replication not started, as every node starts) and its binlog
 * events after the new primary's position are written, as mariadb-binlog prints them (row
 * images decoded in comments), to `<database dir>/errant/node<k>-<gtids>.sql` (mode 0600).
 * Failing to save them is reported as an event, never skipped in silence.
 */
async function keepErrant(db: RejoinContext, k: number): Promise<void> {
  const e = db.state.errant!;
  const name = db.nodeName(k);
  const dir = join(db.dir, 'errant');
  const file = join(dir, `node${k}-${e.gtids.join('_').replace(/[^0-9._-]/g, '')}.sql`);
  try {
    await mkdir(dir, { recursive: true, mode: 0o700 });
    await db.runtime.ensure(db.nodeSpec(k));
    const first = await withAdmin(await db.adminTarget(k), async (c) => String((await q(c, 'SHOW BINARY LOGS'))[0]?.Log_name ?? ''));
    if (!first) throw new Error('the node has no binlog');
    const out = createWriteStream(file, { mode: 0o600 });
    // Listened from the first write: a failed write (a full disk) is this save's failure, not an
    // uncaught error that ends the agent; the file is closed however the run ends.
    const written = finished(out).then(() => undefined, (err: Error) => err);
    try {
      out.write(`-- errant transactions of node ${k}: ${e.gtids.join(', ')}; the new primary was at ${e.after}\n`);
      const from = e.after ? [`--start-position=${e.after}`] : [];
      const r = await db.runtime.exec(name, ['mariadb-binlog', '--user=root', '--read-from-remote-server', '--to-last-log', ...from, '--verbose', first], { stdout: out, env: { MYSQL_PWD: db.state.adminPassword } });
      if (r.exitCode !== 0) throw new Error(clientError(r.stderr));
      const failed = await written;
      if (failed) throw failed;
    } finally {
      out.destroy();
    }
    db.log.warn({ node: k, file, errant: e.gtids }, 'errant transactions saved');
  } catch (err) {
    db.log.error({ err, node: k, errant: e.gtids }, 'errant transactions could not be saved');
    db.emit('database_failover', `errant transactions ${e.gtids.join(', ')} of node ${k} could not be saved before its rebuild: ${(err as Error).message}`, 'failed');
  }
  await updateState(db, { errant: undefined });
}

/**
 * Points node k at the current primary and waits until both replication threads run. Fails
 * at once (BinlogPurgedError) when the primary no longer has the binlog the node needs. Under
 * semi_synch a node being seeded starts with its acknowledgements off, any other with them on.
 */
export async function attach(db: AttachContext, k: number, demote = false): Promise<void> {
  const s = db.state;
  const t = await db.adminTarget(k);
  const target = gtidSeq(await db.primaryBinlogState());
  const acknowledge = db.semiSync ? acknowledges(s, k) : undefined;
  await withAdmin(t, (c) => configureReplica(c, { primaryHost: db.primaryAddress(), primaryPort: NODE_PORT, password: s.replPassword, demote, acknowledge }));
  // Both threads show "Yes" for a moment before the primary answers a request for purged
  // binlog with error 1236, so a node counts as attached once it has caught up with the
  // primary's position at attach time, or has kept replicating without error for 2 s.
  // Wall time: this waits on real servers whatever clock the agent was given.
  const end = systemClock.now() + 30_000;
  let runningSince = 0;
  for (;;) {
    const st = await withAdmin(t, async (c) => ({ rs: await replicaStatus(c), pos: gtidSeq(await gtidCurrentPos(c)) })).catch(() => undefined);
    const rs = st?.rs;
    if (rs && /\b1236\b/.test(rs.lastError)) throw new BinlogPurgedError(rs.lastError);
    if (rs?.ioRunning && rs.sqlRunning) {
      runningSince ||= systemClock.now();
      if (st!.pos >= target || systemClock.now() - runningSince >= 2000) return;
    } else {
      runningSince = 0;
    }
    if (systemClock.now() > end) throw new Error(`node ${k} does not replicate: ${rs?.lastError || 'replication threads not running'}`);
    await systemClock.sleep(50);
  }
}
