import type { Logger } from '../../lib/logger.js';
import { withAdmin, q, type AdminTarget } from './admin.js';
import { configureReplica, gtidCurrentPos, gtidSeq, promote, replicaStatus, waitForGtid } from './replication.js';

export interface ClusterNode {
  index: number;
  address: string;
  port: number;
  admin: AdminTarget;
}

/**
 * Failover: the primary is gone. Each surviving replica first applies what it has already
 * received (relay log), then the one with the highest GTID position is promoted and the others
 * follow it. With semi-sync AFTER_SYNC every acknowledged transaction is in some replica's relay
 * log, so the most advanced replica holds every acknowledged row (docs/agent.md §7).
 * Returns the index of the new primary.
 */
export async function failover(nodes: ClusterNode[], replPassword: string, semiSync: boolean, log: Logger): Promise<number> {
  const positions: { node: ClusterNode; seq: number }[] = [];
  for (const node of nodes) {
    try {
      const seq = await withAdmin(node.admin, async (c) => {
        const rs = await replicaStatus(c);
        if (rs?.gtidIoPos) await waitForGtid(c, rs.gtidIoPos, 5);
        await c.query('STOP SLAVE');
        return gtidSeq(await gtidCurrentPos(c));
      });
      positions.push({ node, seq });
    } catch (err) {
      log.warn({ err, node: node.index }, 'replica unusable for promotion');
    }
  }
  if (positions.length === 0) throw new Error('no replica can be promoted');
  positions.sort((a, b) => b.seq - a.seq || a.node.index - b.node.index);
  const winner = positions[0]!.node;
  await withAdmin(winner.admin, (c) => promote(c, semiSync));
  for (const { node } of positions.slice(1)) {
    await withAdmin(node.admin, (c) => configureReplica(c, { primaryHost: winner.address, primaryPort: winner.port, password: replPassword }));
  }
  log.info({ primary: winner.index, positions: positions.map((p) => [p.node.index, p.seq]) }, 'failover done');
  return winner.index;
}

/** How long a planned switchover waits for the old primary's global read lock (seconds). */
export const SWITCHOVER_LOCK_WAIT_S = 5;

/**
 * Switchover (planned, for patches and resizes): the primary stops taking writes, the target
 * replica catches up to the primary's last transaction, becomes primary, and the old primary
 * and the other replica follow it. Writers see read-only errors for about the catch-up time.
 */
export async function switchover(
  oldPrimary: ClusterNode,
  target: ClusterNode,
  others: ClusterNode[],
  replPassword: string,
  semiSync: boolean,
): Promise<void> {
  const pos = await withAdmin(oldPrimary.admin, async (c) => {
    // read_only waits for the global read lock, and new writes queue behind it meanwhile: a
    // lock someone holds for long (a backup's, a long commit) fails the switchover after a few
    // seconds, to be tried again, instead of holding the writes and the caller for ever.
    await c.query(`SET SESSION lock_wait_timeout=${SWITCHOVER_LOCK_WAIT_S}`);
    await c.query('SET GLOBAL read_only=ON');
    const rows = await q(c, 'SELECT @@gtid_binlog_pos AS p');
    return String(rows[0]?.p ?? '');
  });
  try {
    const caught = await withAdmin(target.admin, (c) => waitForGtid(c, pos, 15));
    if (!caught) throw new Error(`replica ${target.index} did not catch up with ${pos}`);
    await withAdmin(target.admin, (c) => promote(c, semiSync));
  } catch (err) {
    await withAdmin(oldPrimary.admin, (c) => c.query('SET GLOBAL read_only=OFF')).catch(() => undefined);
    throw err;
  }
  await withAdmin(oldPrimary.admin, (c) =>
    configureReplica(c, { primaryHost: target.address, primaryPort: target.port, password: replPassword, demote: true }),
  );
  for (const n of others) {
    await withAdmin(n.admin, (c) => configureReplica(c, { primaryHost: target.address, primaryPort: target.port, password: replPassword }));
  }
}
