import { regionServed } from '../regions.js';
import type { DatabaseRepository } from '../../store/database-repository.js';

/** Whether an agent of `agentRegion` may run a database of `dbRegion` (empty = any region). */
export function servesRegion(agentRegion: string, dbRegion: string): boolean {
  return agentRegion === '' || regionServed(agentRegion, dbRegion);
}

/**
 * Placement of databases on agents: every database not yet placed goes to the connected agent of
 * its region running the fewest databases (ties by id, so the choice is stable), and stays there
 * for its life. Returns the placements made; a database with no agent for its region waits for
 * one to connect.
 */
export function placeDatabases(repo: DatabaseRepository, connected: readonly { id: string; region: string }[]): { database: number; agent: string }[] {
  const placed: { database: number; agent: string }[] = [];
  const live = repo.list().filter((x) => !x.deleting);
  for (const db of live) {
    if (db.agentId !== null) continue;
    const candidates = connected.filter((a) => servesRegion(a.region, db.region));
    if (candidates.length === 0) continue;
    const load = (id: string) => live.filter((x) => x.agentId === id).length;
    const best = [...candidates].sort((a, b) => load(a.id) - load(b.id) || a.id.localeCompare(b.id))[0]!;
    repo.update(db.id, { agentId: best.id });
    db.agentId = best.id;
    placed.push({ database: db.id, agent: best.id });
  }
  return placed;
}
