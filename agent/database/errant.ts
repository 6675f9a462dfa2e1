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

/**
 * A returning member's own transactions the primary lacks (a spread cluster, where positions are
 * compared across hosts). `mine` and `theirs` are gtid_binlog_state values, which keep the last
 * GTID of every (domain, server); the member's own transactions are those with its `serverId`,
 * written while it was primary. Those beyond the primary's last of that server are errant;
 * `after` is the primary's last of them (where the errant binlog events start), '' when it has none.
 */
export function ownGtidsMissing(mine: string, theirs: string, serverId: number): { gtids: string[]; after: string } {
  const parse = (pos: string) => pos.split(',').map((p) => /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(p)).filter((m): m is RegExpExecArray => !!m)
    .map((m) => ({ domain: Number(m[1]), server: Number(m[2]), seq: Number(m[3]) }));
  const have = parse(theirs).filter((g) => g.server === serverId);
  const gtids: string[] = [];
  const after: string[] = [];
  for (const g of parse(mine).filter((x) => x.server === serverId)) {
    const last = have.find((h) => h.domain === g.domain);
    if (last) after.push(`${g.domain}-${serverId}-${last.seq}`);
    const from = (last?.seq ?? 0) + 1;
    if (g.seq < from) continue;
    gtids.push(g.seq === from ? `${g.domain}-${serverId}-${g.seq}` : `${g.domain}-${serverId}-${from}..${g.seq}`);
  }
  return { gtids, after: after.join(',') };
}
