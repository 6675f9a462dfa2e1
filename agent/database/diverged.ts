import { FulcrumError } from '../../lib/errors.js';
import { q, withAdmin } from '../mysql/admin.js';
import type { ClusterContext } from './context.js';
import { updateState } from './state.js';
import { ownGtidsMissing } from './errant.js';

export type DivergedContext = Pick<ClusterContext, 'state' | 'log' | 'adminTarget' | 'primaryBinlogState' | 'primaryReadOnly' | 'save' | 'emit'>;

/**
 * Before a member of a spread cluster follows the primary the control plane named, it is fenced
 * and checked (docs/databases.md, "Clusters across hosts"): semi-sync master side off (a commit
 * still waiting for an acknowledgement finishes locally, unacknowledged) and read-only, then its
 * own transactions (those with its server_id) are compared with what the named primary has of
 * them. Any it has alone are errant: logged, reported as a failed `database_failover` event with
 * their GTIDs, recorded for keepErrant (their binlog events are saved before the rebuild) and the
 * member is marked for a rebuild from the primary. Never kept, never dropped in silence.
 * Returns whether the member must be rebuilt.
 */
export async function divergedFromPrimary(db: DivergedContext, k: number): Promise<boolean> {
  const s = db.state;
  const mine = await withAdmin(await db.adminTarget(k), async (c) => {
    await c.query('SET GLOBAL rpl_semi_sync_master_enabled=OFF');
    await c.query('SET GLOBAL read_only=ON');
    const rows = await q(c, 'SELECT @@gtid_binlog_state AS st, @@server_id AS id');
    return { state: String(rows[0]?.st ?? ''), serverId: Number(rows[0]?.id ?? k) };
  });
  const theirs = await db.primaryBinlogState();
  const { gtids, after } = ownGtidsMissing(mine.state, theirs, mine.serverId);
  if (gtids.length === 0) return false;
  // Not rebuilt from a primary that does not serve yet: it may be held back for lack of the
  // position it was named for (a wiped node), and this member, which holds more, may be the one the
  // control plane names instead. The rejoin fails, fenced, and is tried again.
  if (await db.primaryReadOnly()) {
    throw new FulcrumError('conflict', `node ${k} has transactions the named primary (node ${s.primary}) lacks, and that primary is not writable yet: node ${k} is not rebuilt from it`);
  }
  db.log.error({ node: k, errant: gtids, ownState: mine.state, primary: s.primary, primaryState: theirs }, 'errant transactions on a returning member');
  await updateState(db, { errant: { node: k, gtids, after }, rebuild: s.rebuild.includes(k) ? s.rebuild : [...s.rebuild, k] });
  db.emit('database_failover', `errant transactions: node ${k} had GTIDs ${gtids.join(', ')} that the primary (node ${s.primary}, at ${theirs}) never received; they are not in the database any more: their binlog events are saved in the agent's state folder (errant/) before node ${k} is rebuilt from the primary`, 'failed');
  return true;
}
