import { describe, expect, it } from 'vitest';
import { hashString } from '../../../dataplane/balancing/picker.js';
import { policies } from '../../../dataplane/balancing/registry.js';

const mk = (name: string, weight: number, active = 0) => ({ name, weight, active });

describe('balancing policies', () => {
  it('roundrobin is smooth and weighted: 1:3 interleaves', () => {
    const a = mk('a', 1);
    const b = mk('b', 3);
    const p = policies.roundrobin.build([a, b]);
    const seq = Array.from({ length: 400 }, () => p.pick(0, null)!.name);
    expect(seq.filter((x) => x === 'a')).toHaveLength(100);
    expect(seq.join('')).not.toMatch(/bbbb/);
    expect(seq.join('')).not.toMatch(/aa/);
  });

  it('roundrobin skips excluded nodes and returns undefined when all are excluded', () => {
    const a = mk('a', 1);
    const b = mk('b', 1);
    const p = policies.roundrobin.build([a, b]);
    for (let i = 0; i < 5; i++) expect(p.pick(0, new Set([a]))).toBe(b);
    expect(p.pick(0, new Set([a, b]))).toBeUndefined();
    expect(policies.roundrobin.build([]).pick(0, null)).toBeUndefined();
  });

  it('roundrobin handles large weight sums without a schedule', () => {
    const nodes = Array.from({ length: 100 }, (_, i) => mk(`n${i}`, 97 + (i % 3)));
    const p = policies.roundrobin.build(nodes);
    const counts = new Map<string, number>();
    const total = nodes.reduce((s, n) => s + n.weight, 0);
    for (let i = 0; i < total; i++) {
      const n = p.pick(0, null)!.name;
      counts.set(n, (counts.get(n) ?? 0) + 1);
    }
    for (const n of nodes) expect(counts.get(n.name)).toBe(n.weight);
  });

  it('leastconn prefers idle nodes, then the lowest (active+1)/weight', () => {
    const a = mk('a', 1, 0);
    const b = mk('b', 10, 5);
    const p = policies.leastconn.build([a, b]);
    expect(p.pick(0, null)).toBe(a);
    a.active = 2; // key 3 vs b (5+1)/10 = 0.6
    expect(p.pick(0, null)).toBe(b);
    expect(p.pick(0, new Set([b]))).toBe(a);
  });

  it('source maps one hash to one node and spreads many', () => {
    const nodes = [mk('a', 1), mk('b', 1), mk('c', 1)];
    const p = policies.source.build(nodes);
    const h = hashString('203.0.113.7');
    const first = p.pick(h, null);
    for (let i = 0; i < 50; i++) expect(p.pick(h, null)).toBe(first);
    const seen = new Set<string>();
    for (let i = 0; i < 50; i++) seen.add(p.pick(hashString(`10.0.${i}.1`), null)!.name);
    expect(seen.size).toBe(3);
    // Retry walks on deterministically.
    expect(p.pick(h, new Set([first!]))).not.toBe(first);
  });
});
