import { describe, expect, it } from 'vitest';
import { StatsService } from '../../../control-plane/domain/nodebalancers/stats-service.js';
import { ManualClock } from '../../../lib/clock.js';
import type { NodeBalancerRepository } from '../../../control-plane/domain/nodebalancers/repository.js';

/** StatsService over an in-memory traffic table (the repository port is the seam). */
function repoWith(rows: { bucket: number; bytesIn: number; bytesOut: number; connections: number }[]): NodeBalancerRepository {
  return {
    get: (id: number) => (id === 1 ? ({ id: 1, label: 'balancer1' } as any) : undefined),
    traffic: (_id: number, since: number) => rows.filter((r) => r.bucket >= since),
    addTraffic: (_n: number, _c: number, atMs: number, d: any) => rows.push({ bucket: Math.floor(atMs / 300_000) * 300_000, ...d }),
  } as unknown as NodeBalancerRepository;
}

describe('StatsService', () => {
  const now = Date.UTC(2024, 6, 15, 12, 7, 30);
  const nb = { id: 1, label: 'balancer1' } as any;

  it('is unavailable (400) until there is traffic in the last day', async () => {
    const old = Date.UTC(2024, 6, 14, 11, 0, 0);
    const s = new StatsService(repoWith([{ bucket: old, bytesIn: 1, bytesOut: 1, connections: 1 }]), new ManualClock(now));
    await expect(s.stats(nb)).rejects.toThrow('Stats are unavailable at this time.');
    expect(await s.transfer(1)).toEqual({ in: 0, out: 0, total: 0 });
  });

  it('returns 288 five-minute points ending at the current bucket, per-second averages', async () => {
    const current = Math.floor(now / 300_000) * 300_000;
    const s = new StatsService(repoWith([{ bucket: current - 600_000, bytesIn: 3_000, bytesOut: 6_000, connections: 60 }]), new ManualClock(now));
    const out = (await s.stats(nb)) as any;
    expect(out.title).toBe('balancer1 (1) - day (5 min avg)');
    expect(out.data.connections).toHaveLength(288);
    expect(out.data.connections.at(-1)[0]).toBe(current);
    expect(out.data.connections[0][0]).toBe(current - 287 * 300_000);
    expect(out.data.connections.at(-3)).toEqual([current - 600_000, 0.2]);
    expect(out.data.traffic.in.at(-3)).toEqual([current - 600_000, 80]);
    expect(out.data.traffic.out.at(-3)).toEqual([current - 600_000, 160]);
    expect(out.data.traffic.in.at(-1)).toEqual([current, 0]);
  });

  it('puts traffic reported just before a bucket boundary in the previous point once the boundary passes', async () => {
    // What the console's "latest 5 minutes" figure reads: a burst reported at 17:14:58 is the
    // latest point until 17:15:00 and then only the one before it (docs/console.md).
    const boundary = Date.UTC(2026, 10, 26, 17, 15, 0);
    const rows: { bucket: number; bytesIn: number; bytesOut: number; connections: number }[] = [];
    const clock = new ManualClock(boundary - 2_000);
    const s = new StatsService(repoWith(rows), clock);
    expect(await s.record(1, 1, clock.now(), { bytesIn: 3_000, bytesOut: 6_000, connections: 60 })).toBe(true);
    const before = (await s.stats(nb)) as any;
    expect(before.data.connections.at(-1)).toEqual([boundary - 300_000, 0.2]);
    clock.set(boundary + 5_000);
    const after = (await s.stats(nb)) as any;
    expect(after.data.connections.at(-1)).toEqual([boundary, 0]);
    expect(after.data.connections.at(-2)).toEqual([boundary - 300_000, 0.2]);
  });

  it('sums this month only into transfer, in MB', async () => {
    const lastMonth = Date.UTC(2024, 5, 30, 23, 55, 0);
    const s = new StatsService(repoWith([
      { bucket: lastMonth, bytesIn: 1 << 30, bytesOut: 0, connections: 1 },
      { bucket: Date.UTC(2024, 6, 1), bytesIn: 1 << 20, bytesOut: 3 << 19, connections: 1 },
    ]), new ManualClock(now));
    expect(await s.transfer(1)).toEqual({ in: 1, out: 1.5, total: 2.5 });
    expect(await new StatsService(repoWith([]), new ManualClock(now)).transfer(1)).toEqual({ in: null, out: null, total: null });
  });
});
