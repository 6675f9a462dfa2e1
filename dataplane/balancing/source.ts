import type { Balanced, BalancingPolicy, Picker } from './picker.js';

/**
 * Map-based source hashing (HAProxy's default `balance source`): the client-IP hash modulo the
 * total weight selects a slot in the cumulative weight table. A client keeps its node while the
 * set of eligible nodes is unchanged, which is what the NodeBalancer documents.
 */
class SourcePicker<T extends Balanced> implements Picker<T> {
  private readonly cumulative: Uint32Array;
  private readonly total: number;

  constructor(private readonly nodes: readonly T[]) {
    this.cumulative = new Uint32Array(nodes.length);
    let acc = 0;
    nodes.forEach((n, i) => {
      acc += n.weight;
      this.cumulative[i] = acc;
    });
    this.total = acc;
  }

  private slot(hash: number): number {
    const target = hash % this.total;
    let lo = 0;
    let hi = this.cumulative.length - 1;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.cumulative[mid] > target) hi = mid;
      else lo = mid + 1;
    }
    return lo;
  }

  pick(hash: number, exclude: ReadonlySet<T> | null): T | undefined {
    const n = this.nodes.length;
    if (n === 0) return undefined;
    const first = this.slot(hash);
    // On retry, walk on from the hashed node so the choice stays deterministic.
    for (let k = 0; k < n; k++) {
      const node = this.nodes[(first + k) % n];
      if (exclude === null || !exclude.has(node)) return node;
    }
    return undefined;
  }
}

export const sourcePolicy: BalancingPolicy = {
  name: 'source',
  build: (nodes) => new SourcePicker(nodes),
};
