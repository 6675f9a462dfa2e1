import { lstat, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import type { Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';

/** How often a database's data directory is measured. */
const MEASURE_EVERY_MS = 30_000;

/** Disk used by a directory tree, MiB rounded up (unreadable entries count as empty). */
async function dirSizeMb(dir: string): Promise<number> {
  let total = 0;
  const walk = async (d: string): Promise<void> => {
    for (const e of await readdir(d, { withFileTypes: true }).catch(() => [])) {
      const p = join(d, e.name);
      if (e.isDirectory()) await walk(p);
      // lstat: a link the node planted counts as itself, not as the file it names.
      else total += (await lstat(p).catch(() => ({ size: 0 }))).size;
    }
  };
  await walk(dir);
  return Math.ceil(total / (1024 * 1024));
}

/**
 * `used_disk_size_gb` and the low-disk event (docs/agent.md §8): the plan's disk is a quota the
 * process runtime cannot enforce, so the primary's data directory is measured every 30 s of the
 * injected clock and an event is emitted when it first passes 90 % of the plan's disk.
 */
export class DiskUsage {
  /** The last measurement, MiB. */
  mb = 0;
  private measuredAt = Number.NEGATIVE_INFINITY;
  private low = false;

  constructor(
    private readonly clock: Clock,
    private readonly log: Logger,
    private readonly onLow: (message: string) => void,
  ) {}

  /** Starts a measurement in the background when the last one is old enough. */
  measureIfDue(dataDir: string, quotaMb: number): void {
    const now = this.clock.now();
    if (now - this.measuredAt <= MEASURE_EVERY_MS) return;
    this.measuredAt = now;
    void dirSizeMb(dataDir).then((mb) => {
      this.mb = mb;
      const low = quotaMb > 0 && mb > quotaMb * 0.9;
      if (low && !this.low) this.onLow(`${mb} MiB of ${quotaMb} MiB used`);
      this.low = low;
    }).catch((err) => this.log.warn({ err }, 'disk usage not measured'));
  }
}
