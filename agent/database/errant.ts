/**
 * Errant transactions (docs/databases.md, "Clusters across hosts"; docs/agent.md §7): what an old
 * primary committed that the new primary never received. Pure, over MariaDB GTID positions
 * ("domain-server-seq,..."; with gtid_strict_mode sequence numbers rise within a domain whatever
 * the server).
 */

function byDomain(pos: string): Map<number, { server: number; seq: number }> {
  const out = new Map<number, { server: number; seq: number }>();
  for (const part of pos.split(',')) {
    const m = /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(part);
    if (m) out.set(Number(m[1]), { server: Number(m[2]), seq: Number(m[3]) });
  }
  return out;
}

/**
 * The transactions in `oldPos` beyond `newPos`, one entry per domain: `d-s-n` for one
 * transaction, `d-s-a..n` for a run (s: the server of the last one the old primary had).
 * Empty when the new primary has everything the old one had.
 */
export function errantGtids(oldPos: string, newPos: string): string[] {
  const theirs = byDomain(newPos);
  const out: string[] = [];
  for (const [domain, mine] of byDomain(oldPos)) {
    const have = theirs.get(domain)?.seq ?? 0;
    if (mine.seq <= have) continue;
    out.push(mine.seq === have + 1 ? `${domain}-${mine.server}-${mine.seq}` : `${domain}-${mine.server}-${have + 1}..${mine.seq}`);
  }
  return out;
}
