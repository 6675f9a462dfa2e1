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

/**
 * Whether every GTID of position `pos` is in the history that `state` (a server's
 * gtid_binlog_state: the last GTID of each domain and server id it logged) says the server
 * logged: for each `d-s-n` of `pos`, `state` holds `d-s-m` with m >= n. A copy taken on an old
 * primary after its last transaction that reached the others (an errant one) is not: its GTID's
 * server id stops lower in the new primary's state, or is missing from it.
 */
export function gtidInHistory(state: string, pos: string): boolean {
  const last = new Map<string, number>();
  for (const part of state.split(',')) {
    const m = /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(part);
    if (m) last.set(`${m[1]}-${m[2]}`, Math.max(last.get(`${m[1]}-${m[2]}`) ?? 0, Number(m[3])));
  }
  for (const part of pos.split(',')) {
    if (!part.trim()) continue;
    const m = /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(part);
    if (!m || (last.get(`${m[1]}-${m[2]}`) ?? -1) < Number(m[3])) return false;
  }
  return true;
}
