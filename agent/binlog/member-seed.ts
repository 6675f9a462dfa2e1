import { join } from 'node:path';
import type { Logger } from '../../lib/logger.js';
import { gtidInHistory } from '../../lib/gtid.js';
import type { BackupManifest, BackupStorage } from '../backup/backup-storage.js';
import { isPhysical } from '../backup/physical-backup.js';
import type { MemberSeed } from '../database/context.js';
import type { DatabaseController } from '../database/controller.js';
import { serverSocket, withAdmin } from '../mysql/admin.js';
import type { ContainerRuntime } from '../runtime/container-runtime.js';
import { entries, removeTree, withDir } from '../runtime/no-follow.js';
import { placeCopy, REPLICATION_FILES, stepTimer, unpackBase } from './physical-seed.js';
import { sameSeries } from './replay.js';

export interface MemberSeedDeps {
  runtime: ContainerRuntime;
  /** The agent's store of backups and bases: a shared object store, read as the primary's agent wrote it. */
  storage: BackupStorage;
  logger: Logger;
}

export type MemberTarget = Pick<DatabaseController, 'id' | 'state' | 'adminTarget' | 'nodeName' | 'primaryBinlogState'>;

/**
 * The newest physical base of the database that a rebuilt member can start from: of the engine
 * series the member runs (mariadb-backup prepares only its own series), with a snapshot position
 * in the primary's history (`gtid_binlog_state`): a base an old primary took after its last
 * transaction the others have (an errant one) would bring that transaction back.
 */
export function memberBase(manifests: readonly BackupManifest[], version: string, primaryState: string): BackupManifest | { skipped: string } {
  const physical = manifests.filter((m) => m.type === 'base' && isPhysical(m) && m.snapshotGtid !== undefined);
  if (physical.length === 0) return { skipped: 'the store holds no physical base of the database' };
  const series = physical.filter((m) => sameSeries(m.engineVersion, version));
  if (series.length === 0) return { skipped: `no physical base in the store is of the member's engine series (${version})` };
  const held = series.filter((m) => gtidInHistory(primaryState, m.snapshotGtid!));
  if (held.length === 0) return { skipped: 'no physical base in the store is at a position the primary has (taken on an old primary past the failover)' };
  return held.sort((a, b) => a.finishedMs - b.finishedMs).at(-1)!;
}

/**
 * Seeds member k of a cluster spread over agent hosts, freshly made and running on its own empty
 * data, from the newest physical base of the database in the shared object store (bases are
 * taken by the primary's agent's archiver, docs/agent.md §6): downloaded, checked and prepared on
 * the member's own engine (physical-seed.ts unpackBase), placed as its data directory, started.
 * Unlike a fork's copy, the accounts are the database's own and stay: linroot and the customer's
 * accounts as the base has them, the replication account as the cluster shares it; only
 * root@localhost, whose password is each agent's own, is set back to this agent's by the node's
 * init file on start (agent/mysql/init-sql.ts). Then the member's binlog starts after the base's
 * position (RESET MASTER, gtid_binlog_state: a member seeded from it later is told the earlier
 * history is not there, rather than silently missing it) and gtid_slave_pos is that position, so
 * the caller's attach (MASTER_USE_GTID=slave_pos) streams only what the primary wrote since.
 * Returns `skipped` with the reason when there is no usable base; throws when one could not be
 * read or placed (the caller wipes the node and falls back to replaying the primary's binlog).
 */
export async function seedMemberFromBase(d: MemberSeedDeps, db: MemberTarget, k: number): Promise<MemberSeed> {
  const s = db.state!;
  const started = Date.now();
  const { ms, step } = stepTimer();
  const chosen = memberBase(await d.storage.list(db.id), s.running.version, await db.primaryBinlogState());
  if ('skipped' in chosen) return chosen;
  const m = chosen;
  const name = db.nodeName(k);
  step('listMs');
  const socket = await withAdmin(await db.adminTarget(k), serverSocket);
  // The database's own key: the primary's agent encrypted the base with it (backup-key.ts).
  const { work, toolUid } = await unpackBase(d, name, socket, { id: db.id, backupKey: s.backupKey }, m, step);
  try {
    // A copy taken on a replica carries its replication state files; the member's come from attach.
    for (const e of await withDir(work, entries)) if (REPLICATION_FILES.test(e)) await removeTree(join(work, e));
    await placeCopy(d.runtime, name, work, toolUid, true);
  } finally {
    await removeTree(work).catch(() => undefined);
  }
  step('placeMs');
  await d.runtime.start(name);
  step('startMs');
  await withAdmin(await db.adminTarget(k), async (x) => {
    await x.query('STOP SLAVE');
    await x.query('RESET SLAVE ALL');
    await x.query('RESET MASTER');
    await x.query('SET GLOBAL gtid_binlog_state = ?', [m.snapshotGtid]);
    await x.query('SET GLOBAL gtid_slave_pos = ?', [m.snapshotGtid]);
  });
  step('positionMs');
  d.logger.info({ database: db.id, node: k, backup: m.id, bytes: m.sizeBytes, snapshotGtid: m.snapshotGtid, ms: Date.now() - started, steps: ms }, 'member seeded from the store\'s physical base');
  return { backupId: m.id, snapshotGtid: m.snapshotGtid!, bytes: m.sizeBytes, ms };
}
