import { FulcrumError } from '../../../lib/errors.js';
import { regionServed } from '../regions.js';
import type { Clock } from '../../../lib/clock.js';
import type { NodeBalancerRepository } from './repository.js';
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

  /** Adds traffic a data plane of `fromRegion` counted; NodeBalancers outside its region are skipped. */
  async record(nbId: number, configId: number, atMs: number, d: { bytesIn: number; bytesOut: number; connections: number }, fromRegion = '*'): Promise<boolean> {
    const nb = await this.repo.get(nbId);
    if (!nb || !regionServed(fromRegion, nb.region)) return false;
    await this.repo.addTraffic(nbId, configId, atMs, d);
    return true;
  }

  async transfer(nbId: number): Promise<{ in: number | null; out: number | null; total: number | null }> {
    const now = new Date(this.clock.now());
    const monthStart = Date.UTC(now.getUTCFullYear(), now.getUTCMonth(), 1);
    const rows = await this.repo.traffic(nbId, monthStart);
    if (rows.length === 0) return { in: null, out: null, total: null };
    const bin = rows.reduce((a, r) => a + r.bytesIn, 0);
    const bout = rows.reduce((a, r) => a + r.bytesOut, 0);
    const round = (x: number) => Math.round((x / MB) * 1000) / 1000;
    return { in: round(bin), out: round(bout), total: round(bin + bout) };
  }

  /**
   * The day graph: one point per 5-minute bucket from 24 hours ago up to the current bucket,
   * each `[bucket start in ms, value]`, zero where nothing was reported. Traffic is the average
   * in bits per second over the bucket and connections the average new connections per second,
   * as the "(5 min avg)" title says. 400 until the NodeBalancer has reported any traffic that day.
   */
  async stats(nb: NodeBalancer): Promise<Record<string, unknown>> {
    const now = this.clock.now();
    const current = Math.floor(now / BUCKET_MS) * BUCKET_MS;
    const since = current - DAY_MS + BUCKET_MS;
    const rows = await this.repo.traffic(nb.id, since);
    if (rows.length === 0) throw FulcrumError.conflict('Stats are unavailable at this time.');
    const byBucket = new Map(rows.map((r) => [r.bucket, r]));
    const secs = BUCKET_MS / 1000;
    const round = (x: number) => Math.round(x * 1000) / 1000;
    const connections: [number, number][] = [];
    const tin: [number, number][] = [];
    const tout: [number, number][] = [];
    for (let b = since; b <= current; b += BUCKET_MS) {
      const r = byBucket.get(b);
      connections.push([b, round((r?.connections ?? 0) / secs)]);
      tin.push([b, round(((r?.bytesIn ?? 0) * 8) / secs)]);
      tout.push([b, round(((r?.bytesOut ?? 0) * 8) / secs)]);
    }
    return {
      title: `${nb.label} (${nb.id}) - day (5 min avg)`,
      data: { connections, traffic: { in: tin, out: tout } },
    };
  }
}
