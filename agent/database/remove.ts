import { rm } from 'node:fs/promises';
import { removeTree } from '../runtime/no-follow.js';
import { LABEL_AGENT, LABEL_DATABASE } from '../runtime/container-runtime.js';
import type { ClusterContext } from './context.js';

export type RemoveContext = Pick<ClusterContext, 'id' | 'agentId' | 'dir' | 'backupsDir' | 'runtime' | 'nodeIndexes' | 'nodeName' | 'closeEndpoints' | 'settleSaves'>;

/**
 * Removes everything of the database: every node labelled with it (with its
 * data, also nodes beyond the current size), its folder and its backups. Idempotent, so a
 * failed removal is simply run again. `keepBackups`: the backups folder is the backup store's,
 * whose purge removes it once no fork reads it (day-two.ts, removeStored).
 */
export async function remove(db: RemoveContext, o: { keepBackups?: boolean } = {}): Promise<void> {
  await db.closeEndpoints();
  const names = new Set(db.nodeIndexes().map((k) => db.nodeName(k)));
  for (const n of await db.runtime.list({ [LABEL_AGENT]: db.agentId, [LABEL_DATABASE]: String(db.id) })) names.add(n.name);
  await Promise.all([...names].map((n) => db.runtime.remove(n, { withData: true })));
  // The controller is marked deleted before this runs, so no new save starts; one in flight ends first.
  await db.settleSaves();
  // Its nodes' folders (the nodes' own, should any be left) are removed without following links.
  await removeTree(db.dir);
  if (!o.keepBackups) await rm(db.backupsDir, { recursive: true, force: true });
}
