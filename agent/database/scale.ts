import { withAdmin } from '../mysql/admin.js';
import { switchover } from '../mysql/promotion.js';
import { promote } from '../mysql/replication.js';
import type { ClusterContext } from './context.js';
import { updateState } from './state.js';
import { rejoin, type RejoinContext } from './rejoin.js';

export type ScaleContext = RejoinContext & Pick<ClusterContext, 'nodeIndexes' | 'clusterNode' | 'allocateAddresses'>;

/**
 * Changes the number of nodes to `to` (docs/agent.md §7, "Scaling"); the node serving as primary
 * keeps serving, and its data with it.
 *
 * Up: the new nodes get addresses (saved first, so a crash half-way leaves nodes the reconcile
 * loop heals as missing ones), then each is seeded from the primary and attached as a replica:
 * the rebuild path of rejoin, which replays the primary's binlog from the first GTID while it
 * holds the whole history and otherwise loads a consistent dump of the primary that carries its
 * GTID position. The primary is not restarted here; the config its new role needs (semi-sync)
 * is the rolling restart the plan runs next.
 *
 * Down: the primary moves to node 1 first when it is elsewhere (a switchover, as a rolling
 * restart does), then every other node is removed with its data, and node 1 stops waiting for
 * semi-sync acknowledgements nobody will send.
 *
 * Only the control plane starts a scale, and it records the `database_resize` event clients wait
 * for (finished when the agent reports convergence), so the agent reports no event of its own: a
 * second one would read as a second resize.
 */
export async function scale(db: ScaleContext, to: number): Promise<void> {
  const s = db.state;
  const from = s.addresses.length;
  if (to > from) {
    await updateState(db, { addresses: [...s.addresses, ...(await db.allocateAddresses(to - from))] });
    for (let k = from + 1; k <= to; k++) await rejoin(db, k, true);
    db.log.info({ from, to }, 'scaled up: the new nodes were seeded from the primary and replicate from it');
    return;
  }
  if (s.primary > to) {
    const others = await Promise.all(db.nodeIndexes().filter((k) => k !== s.primary && k !== 1).map((k) => db.clusterNode(k)));
    await switchover(await db.clusterNode(s.primary), await db.clusterNode(1), others, s.replPassword, false);
    await updateState(db, { primary: 1 });
  }
  // Before the replicas go: a semi-sync primary would stall each write for its timeout.
  if (to === 1) await withAdmin(await db.adminTarget(1), (c) => promote(c, false));
  for (let k = from; k > to; k--) await db.runtime.remove(db.nodeName(k), { withData: true });
  await updateState(db, {
    addresses: s.addresses.slice(0, to),
    rebuild: s.rebuild.filter((k) => k <= to),
    ...(s.errant && s.errant.node > to ? { errant: undefined } : {}),
  });
  await db.refresh();
  db.log.info({ from, to }, 'scaled down: node 1 serves as primary, the other nodes and their data were removed');
}
