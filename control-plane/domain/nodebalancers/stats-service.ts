import { FulcrumError } from '../../../lib/errors.js';
import type { Clock } from '../../../lib/clock.js';
import type { NodeBalancerRepository } from '../../store/nodebalancer-repository.js';
import type { NodeBalancer } from './model.js';

const BUCKET_MS = 5 * 60 * 1000;
const DAY_MS = 24 * 60 * 60 * 1000;
const MB = 1024 * 1024;

/**
 * Numbers users read back: `transfer` (MB this calendar month, UTC) and `/stats` (5-minute
 * points over the last day). Both are built from the counter deltas data planes report, stored
 * per 5-minute bucket so they survive control-plane restarts.
 */
export class StatsService {
  constructor(
    private readonly repo: NodeBalancerRepository,
    private readonly clock: Clock,
  ) {}

  record(nbId: number, configId: number, atMs: number, d: { bytesIn: number; bytesOut: number; connections: number }): void {
    if (!this.repo.get(nbId)) return;
    this.repo.addTraffic(nbId, configId, atMs, d);
  }

  transfer(nbId: number): { in: number | null; out: number | null; total: number | null } {
    const now = new Date(this.clock.now());
    const monthStart = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
    const rows = this.repo.traffic(nbId, monthStart);
    if (rows.length === 0) return { in: null, out: null, total: null };
    const bin = rows.reduce((a, r) => a + r.bytesIn, 0);
    const bout = rows.reduce((a, r) => a + r.bytesOut, 0);
    const round = (x: number) => Math.round((x / MB) * 1000) / 1000;
    return { in: round(bin), out: round(bout), total: round(bin + bout) };
  }

  stats(nb: NodeBalancer): Record<string, unknown> {
    const now = this.clock.now();
    const since = Math.floor((now - DAY_MS) / BUCKET_MS) * BUCKET_MS;
    const rows = this.repo.traffic(nb.id, since);
    if (rows.length === 0) throw FulcrumError.conflict('Stats are unavailable at this time.');
    // Traffic points are average bits per second over the bucket, as the real graphs show;
    // connections are the count of new connections in the bucket.
    const secs = BUCKET_MS / 1000;
    return {
      title: `${nb.label} (${nb.id}) - day (5 min avg)`,
      data: {
        connections: rows.map((r) => [r.bucket, r.connections]),
        traffic: {
          in: rows.map((r) => [r.bucket, (r.bytesIn * 8) / secs]),
          out: rows.map((r) => [r.bucket, (r.bytesOut * 8) / secs]),
        },
      },
    };
  }
}
