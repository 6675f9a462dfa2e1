import { hashString, type Balanced, type BalancingPolicy, type Picker } from './picker.js';

/**
 * Points on the ring per unit of weight, and a bound on the whole ring's size. A node's count
 * depends on its own weight only (so removing another node moves nothing of its share), and a
 * node of weight 1 still needs enough points for an even spread: with 4, three such nodes made a
 * 12-point ring on which one node could own a few percent of the hashes.
 */
const POINTS_PER_WEIGHT = 40;
const MAX_POINTS = 131_072;

/**
 * Consistent hashing (ring_hash, docs/dataplane.md "UDP"): each node owns points on a 32-bit ring,
 * placed by hashing its id and the point's number, as many as its weight asks for; a client hash
 * belongs to the first point at or after it. Adding or removing a node moves only the hashes
 * between its points and their predecessors, so every other client keeps its node. The points
 * of a node depend only on its id, so several data planes and rebuilt pickers agree.
 */
class RingHashPicker<T extends Balanced> implements Picker<T> {
  private readonly points: Uint32Array;
  private readonly owners: T[];

  constructor(nodes: readonly T[]) {
    const total = nodes.reduce((a, n) => a + n.weight, 0) * POINTS_PER_WEIGHT;
    const scale = total > MAX_POINTS ? MAX_POINTS / total : 1;
    const ring: { at: number; node: T }[] = [];
    nodes.forEach((node, i) => {
      const key = node.id ?? i;
      const count = Math.max(1, Math.round(node.weight * POINTS_PER_WEIGHT * scale));
      for (let p = 0; p < count; p++) ring.push({ at: hashString(`${key}#${p}`), node });
    });
    // Ties (two nodes hashing to one point) are broken by id, so the order never depends on input order.
    ring.sort((a, b) => a.at - b.at || (a.node.id ?? 0) - (b.node.id ?? 0));
    this.points = Uint32Array.from(ring.map((r) => r.at));
    this.owners = ring.map((r) => r.node);
  }

  private first(hash: number): number {
    let lo = 0;
    let hi = this.points.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if (this.points[mid]! < hash) lo = mid + 1;
      else hi = mid;
    }
    return lo === this.points.length ? 0 : lo;
  }

  pick(hash: number, exclude: ReadonlySet<T> | null): T | undefined {
    const n = this.owners.length;
    if (n === 0) return undefined;
    const start = this.first(hash >>> 0);
    // On retry, walk on clockwise: the next node on the ring is where this hash would go without the excluded ones.
    for (let k = 0; k < n; k++) {
      const node = this.owners[(start + k) % n]!;
      if (exclude === null || !exclude.has(node)) return node;
    }
    return undefined;
  }
}

export const ringHashPolicy: BalancingPolicy = {
  name: 'ring_hash',
  build: (nodes) => new RingHashPicker(nodes),
};
