import type { NodeState } from '../runtime/node-state.js';

/**
 * Nodes one tcp connection or one http request may try before the client is told that nothing
 * can serve it. Only attempts that sent nothing (a failed connect) move on to another node.
 */
export const MAX_ATTEMPTS = 3;

/** Adds `node` to the nodes this attempt must not pick again; the set is made on first use. */
export function exclude(tried: Set<NodeState> | null, node: NodeState): Set<NodeState> {
  const set = tried ?? new Set<NodeState>();
  set.add(node);
  return set;
}
