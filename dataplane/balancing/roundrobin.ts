import type { Balanced, BalancingPolicy, Picker } from './picker.js';

function gcd(a: number, b: number): number {
  while (b) [a, b] = [b, a % b];
  return a;
}

/**
 * Smooth weighted round robin (nginx's algorithm): weights 1 and 3 give a b b a b b ... spread
 * out rather than a b b b. When the reduced cycle is short it is precomputed, so a pick is an
 * array index; otherwise the O(n) smooth step runs per pick.
 */
class RoundRobinPicker<T extends Balanced> implements Picker<T> {
  private readonly schedule: T[] | null;
  private readonly current: Float64Array;
  private readonly total: number;
  private next = 0;

  constructor(private readonly nodes: readonly T[]) {
    this.current = new Float64Array(nodes.length);
    let g = 0;
    let total = 0;
    for (const n of nodes) {
      g = gcd(n.weight, g);
      total += n.weight;
    }
    this.total = total;
    const cycle = g ? total / g : 0;
    if (cycle > 0 && cycle <= 8192) {
      const sched: T[] = [];
      for (let i = 0; i < cycle; i++) sched.push(this.smoothStep());
      this.schedule = sched;
      this.current.fill(0);
      // Start each picker at a random offset so that several data planes (or a rebuilt picker)
      // do not all send their first request to the same node.
      this.next = Math.floor(Math.random() * cycle);
    } else {
      this.schedule = null;
    }
  }

  private smoothStep(): T {
    let best = 0;
    for (let i = 0; i < this.nodes.length; i++) {
      this.current[i] += this.nodes[i].weight;
      if (this.current[i] > this.current[best]) best = i;
    }
    this.current[best] -= this.total;
    return this.nodes[best];
  }

  pick(_hash: number, exclude: ReadonlySet<T> | null): T | undefined {
    const n = this.nodes.length;
    if (n === 0) return undefined;
    const sched = this.schedule;
    const tries = sched ? sched.length : n * 2;
    for (let i = 0; i < tries; i++) {
      let node: T;
      if (sched) {
        node = sched[this.next];
        this.next = this.next + 1 === sched.length ? 0 : this.next + 1;
      } else {
        node = this.smoothStep();
      }
      if (exclude === null || !exclude.has(node)) return node;
    }
    return undefined;
  }
}

export const roundRobinPolicy: BalancingPolicy = {
  name: 'roundrobin',
  build: (nodes) => new RoundRobinPicker(nodes),
};
