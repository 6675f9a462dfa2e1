/**
 * MariaDB GTID positions ("domain-server-seq,..."), pure. Under gtid_strict_mode sequence numbers
 * rise within a domain whatever server wrote them, so a position is its highest sequence number
 * per domain.
 */

function seqByDomain(pos: string): Map<number, number> {
  const out = new Map<number, number>();
  for (const part of pos.split(',')) {
    const m = /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(part);
    if (m) out.set(Number(m[1]), Math.max(out.get(Number(m[1])) ?? 0, Number(m[3])));
  }
  return out;
}

/**
 * Whether a node at `have` (its gtid_current_pos) holds every transaction up to `need`: in every
 * domain of `need`, its sequence number is at least as high. An empty `need` is held by anyone.
 */
export function gtidContains(have: string, need: string): boolean {
  const mine = seqByDomain(have);
  for (const [domain, seq] of seqByDomain(need)) if ((mine.get(domain) ?? 0) < seq) return false;
  return true;
}
