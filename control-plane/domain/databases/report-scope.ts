import type { Logger } from '../../../lib/logger.js';
import type { DatabaseRepository } from './repository.js';
import type { MemberPlacement, MemberReport } from './model.js';
import { LruMap } from '../../../lib/lru.js';

/** Where a database stands to a reporting agent: it holds it, other agents do, or it is unknown. */
export type ReportScope = 'held' | 'foreign' | 'unknown';

/**
 * Whether an agent holds a database: it is the database's reporting agent or runs one of its
 * placed members. Agents may run on hosts of tenants who do not trust each other, so anything an
 * agent reports about a database it does not hold is ignored (docs/databases.md, "Whose report
 * counts"); only placement names a database's agents, never a report.
 */
export async function reportScope(repo: DatabaseRepository, agentId: string, databaseId: number): Promise<ReportScope> {
  const db = await repo.get(databaseId);
  if (!db) return 'unknown';
  if (db.agentId === agentId || (await repo.members(databaseId)).some((m) => m.agentId === agentId)) return 'held';
  return 'foreign';
}

/**
 * Whether a member report counts: only a row about a placed member, written by the agent that
 * member is placed on. A row left from a member scaled away or from an agent that no longer runs
 * the member describes no server of the cluster. `placements` may span several databases.
 */
export function fromPlacedAgent(placements: readonly MemberPlacement[]): (r: MemberReport) => boolean {
  const agentOf = new Map(placements.map((m) => [`${m.databaseId}:${m.member}`, m.agentId]));
  return (r) => agentOf.get(`${r.databaseId}:${r.member}`) === r.agentId;
}

/** How many (agent, database, field) notices are remembered before the memory starts over. */
const NOTICES_KEPT = 10_000;

/**
 * Logs an ignored part of a report once per agent, database and field: an agent repeats its
 * report every few seconds, and a log line per report would flood the log (a hostile agent could
 * use that). A database the store does not know (purged a moment ago) is debug, one held by other
 * agents a warning.
 */
export class IgnoredReports {
  private readonly seen = new LruMap<string, true>(NOTICES_KEPT);

  constructor(private readonly log: Logger) {}

  note(agentId: string, databaseId: number, field: string, scope: Exclude<ReportScope, 'held'>): void {
    const key = `${agentId}\u0000${databaseId}\u0000${field}`;
    if (this.seen.has(key)) return;
    this.seen.set(key, true);
    const line = { agent: agentId, database: databaseId, field };
    if (scope === 'foreign') this.log.warn(line, 'agent report about a database it does not hold ignored');
    else this.log.debug(line, 'agent report about an unknown database ignored');
  }
}
