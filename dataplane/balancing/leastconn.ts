import type { Balanced, BalancingPolicy, Picker } from './picker.js';

/**
 * Weighted least connections, HAProxy's key: (active + 1) / weight, lowest wins; nodes with no
 * connection at all always win, so light load is spread rather than all sent to the heaviest
 * node. Ties rotate, so equal nodes share new connections.
 */
class LeastConnPicker<T extends Balanced> implements Picker<T> {
  private rotor = 0;
  constructor(private readonly nodes: readonly T[]) {}

  pick(_hash: number, exclude: ReadonlySet<T> | null): T | undefined {
    const nodes = this.nodes;
    const n = nodes.length;
    if (n === 0) return undefined;
    let best: T | undefined;
    let bestKey = Infinity;
    const start = this.rotor;
    this.rotor = start + 1 >= n ? 0 : start + 1;
    for (let k = 0; k < n; k++) {
      let i = start + k;
      if (i >= n) i -= n;
      const node = nodes[i];
      if (exclude !== null && exclude.has(node)) continue;
      const key = node.active === 0 ? 0 : (node.active + 1) / node.weight;
      if (key < bestKey) {
        bestKey = key;
        best = node;
      }
    }
    return best;
  }
}

export const leastConnPolicy: BalancingPolicy = {
  name: 'leastconn',
  build: (nodes) => new LeastConnPicker(nodes),
};
