import type { NodeState } from '../runtime/node-state.js';

/** Passes in a row a DOWN node needs to come back (HAProxy's default `rise 2`). */
export const RISE = 2;

/**
 * Counts one active probe result against `node` and returns the status it moves to, or null
 * when it stays: an unknown node is UP at its first pass, a DOWN one after RISE passes in a row,
 * and any other node goes DOWN after `attempts` failures in a row (`check_attempts`).
 */
export function afterProbe(node: NodeState, failure: string | null, attempts: number): 'UP' | 'DOWN' | null {
  const before = node.status;
  if (failure === null) {
    node.passes++;
    node.fails = 0;
    if (before === 'unknown' || (before === 'DOWN' && node.passes >= RISE)) return 'UP';
  } else {
    node.fails++;
    node.passes = 0;
    if (before !== 'DOWN' && node.fails >= attempts) return 'DOWN';
  }
  return null;
}
