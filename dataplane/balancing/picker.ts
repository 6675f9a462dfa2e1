import type { Algorithm } from '../config/model.js';

/** What a policy needs to know about a node. `active` is read live (in-flight connections). */
export interface Balanced {
  readonly weight: number;
  readonly active: number;
  /** A stable identity (the node id): ring_hash places a node's points by it. */
  readonly id?: number;
}

/**
 * An immutable view of the nodes that may take new traffic. It is rebuilt whenever the node set
 * or their health changes; pickers never do I/O and never touch sockets.
 * `pick` returns undefined when nothing can serve (a value, not a throw: the caller answers 503
 * or closes). `exclude` lists nodes that already failed for this connection (retry).
 * `hash` is the client hash (`source`: the client IP; `ring_hash`: the UDP flow), ignored by the others.
 */
export interface Picker<T extends Balanced> {
  pick(hash: number, exclude: ReadonlySet<T> | null): T | undefined;
}

export interface BalancingPolicy {
  readonly name: Algorithm;
  /** Builds a picker over `nodes` (already filtered to the eligible, healthy ones). */
  build<T extends Balanced>(nodes: readonly T[]): Picker<T>;
}

export const emptyPicker: Picker<never> = Object.freeze({ pick: () => undefined });

/** FNV-1a over a string: cheap, stable across processes (several data planes agree). */
export function hashString(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  // A final avalanche so that neighbouring IPs do not land on neighbouring slots.
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  return h >>> 0;
}
