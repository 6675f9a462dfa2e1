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

/** Idempotent methods (RFC 9110 §9.2.2), each with the space that ends it on the request line. */
const IDEMPOTENT = ['GET ', 'HEAD ', 'PUT ', 'DELETE ', 'OPTIONS ', 'TRACE '].map((m) => Buffer.from(m, 'latin1'));

/**
 * Whether the request whose head starts `head` (a parsed head: the method is its first token)
 * has an idempotent method. Only such a request is replayed after a reused backend connection
 * failed without an answer: the backend may have acted on it before it closed (RFC 9112 §9.3.1.1:
 * a proxy must not retry a non-idempotent request on its own).
 */
export function idempotent(head: Buffer): boolean {
  for (const m of IDEMPOTENT) {
    if (head.length > m.length && head.compare(m, 0, m.length, 0, m.length) === 0) return true;
  }
  return false;
}
