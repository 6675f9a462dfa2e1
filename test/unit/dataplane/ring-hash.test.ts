import { describe, expect, it } from 'vitest';
import { hashString } from '../../../dataplane/balancing/picker.js';
import { policies } from '../../../dataplane/balancing/registry.js';

/** ring_hash (dataplane/balancing/ring-hash.ts): spread, stability, weights and retries. */
const nodes = (ids: number[], weight = 50) => ids.map((id) => ({ id, weight, active: 0 }));
const flows = Array.from({ length: 3000 }, (_, i) => hashString(`10.0.${i >> 8}.${i & 255}:${40000 + i}`));

describe('ring_hash picker', () => {
  it('spreads flows over every node, roughly evenly', () => {
    const ns = nodes([1, 2, 3, 4]);
    const p = policies.ring_hash.build(ns);
    const count = new Map<number, number>();
    for (const h of flows) count.set(p.pick(h, null)!.id, (count.get(p.pick(h, null)!.id) ?? 0) + 1);
    for (const n of ns) expect(count.get(n.id)).toBeGreaterThan(3000 / 4 / 2);
  });

  it('spreads flows evenly also over nodes of weight 1, whatever their ids', () => {
    for (let base = 1; base < 4000; base += 97) {
      const ns = nodes([base, base + 1, base + 2], 1);
      const p = policies.ring_hash.build(ns);
      const count = new Map<number, number>();
      for (const h of flows) count.set(p.pick(h, null)!.id, (count.get(p.pick(h, null)!.id) ?? 0) + 1);
      // A fair share is 1,000 of 3,000; no node of equal weight may fall below 40% of it.
      for (const n of ns) expect(count.get(n.id) ?? 0, `ids ${base}..${base + 2}`).toBeGreaterThan(400);
    }
  });

  it('moves only the removed node\'s flows, and only the added node\'s share', () => {
    const before = policies.ring_hash.build(nodes([1, 2, 3, 4]));
    const after = policies.ring_hash.build(nodes([1, 2, 4]));
    const grown = policies.ring_hash.build(nodes([1, 2, 3, 4, 5]));
    let moved = 0;
    for (const h of flows) {
      const was = before.pick(h, null)!.id;
      const now = after.pick(h, null)!.id;
      if (was !== 3) expect(now).toBe(was);
      else expect(now).not.toBe(3);
      const g = grown.pick(h, null)!.id;
      if (g !== 5) expect(g).toBe(was);
      else moved++;
    }
    expect(moved).toBeGreaterThan(0);
    expect(moved).toBeLessThan(3000 / 5 * 2);
  });

  it('does not depend on the order nodes are given in, and gives weight its share', () => {
    const a = policies.ring_hash.build(nodes([1, 2, 3]));
    const b = policies.ring_hash.build(nodes([3, 1, 2]));
    for (const h of flows) expect(a.pick(h, null)!.id).toBe(b.pick(h, null)!.id);
    const heavy = policies.ring_hash.build([{ id: 1, weight: 200, active: 0 }, { id: 2, weight: 50, active: 0 }]);
    const ones = flows.filter((h) => heavy.pick(h, null)!.id === 1).length;
    expect(ones).toBeGreaterThan(3000 * 0.65);
  });

  it('walks on to the next node when the hashed one is excluded, and answers undefined when none is left', () => {
    const ns = nodes([1, 2, 3]);
    const p = policies.ring_hash.build(ns);
    for (const h of flows.slice(0, 100)) {
      const first = p.pick(h, null)!;
      const next = p.pick(h, new Set([first]))!;
      expect(next).not.toBe(first);
    }
    expect(p.pick(flows[0]!, new Set(ns))).toBeUndefined();
    expect(policies.ring_hash.build([]).pick(1, null)).toBeUndefined();
  });
});
