import { AGENT_SILENT_MS, gtidProgress } from './failover-decision.js';
import { currentReports } from './failover-coordinator.js';
import { servesRegion, spansAgents } from './placement.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport, MemberSeed } from './model.js';

/*
 * The pure rules of host healing (docs/multi-host.md, "A lost host"): how a host stands, which
 * cluster lacks a member, where a member or a rebuilt 1-node database goes. HostHealing
 * (host-healing.ts) acts on them.
 */

/** How an agent host stands (docs/multi-host.md, "A lost host"). */
export type HostState = 'up' | 'unreachable' | 'lost';

export function hostState(a: Pick<AgentRecord, 'connected' | 'lostAt'>): HostState {
  if (a.lostAt !== null && a.lostAt !== undefined) return 'lost';
  return a.connected ? 'up' : 'unreachable';
}

/** A placement waiting for a host: on no agent (''), or on one declared lost. */
export function homeless(m: MemberPlacement, lost: ReadonlySet<string>): boolean {
  return m.agentId === '' || lost.has(m.agentId);
}

/**
 * Whether a spread cluster lacks a member right now: one is placed nowhere or on a lost host, has
 * not reported since it was placed (a re-placed member before its first report), or is still
 * being seeded on its new host (its mark is cleared with the "caught up" event, caughtUp below):
 * until then only the others hold the data, and one more loss takes the database down. The
 * observer shows such a cluster `degraded` rather than `active`.
 */
export function clusterIncomplete(placements: readonly MemberPlacement[], reports: readonly MemberReport[], lost: ReadonlySet<string>): boolean {
  if (!spansAgents(placements)) return false;
  const current = currentReports(placements, reports);
  return placements.some((m) => homeless(m, lost) || m.seed !== undefined || !current.has(m.member));
}

/**
 * Whether a member placed on a new host has caught up: its own agent reports it a running replica
 * at least as far as the primary was when it was placed (`seed.gtid`). Pure.
 */
export function caughtUp(seed: MemberSeed, r: Pick<MemberReport, 'state' | 'role' | 'gtid'> | undefined): boolean {
  return r !== undefined && r.state === 'running' && r.role === 'replica' && gtidProgress(r.gtid) >= seed.gtid;
}

/**
 * The agent a homeless member of `db` goes to: a connected, reporting, not lost, not draining agent of its
 * region that can run part of a cluster and holds no member of it yet (members stay on distinct
 * hosts), least loaded first (live databases with a member on it; ties by id). Pure.
 */
export function replacementAgent(
  db: Pick<DatabaseRecord, 'id' | 'region'>, placements: readonly MemberPlacement[], agents: readonly AgentRecord[],
  load: ReadonlyMap<string, number>, now: number,
): string | undefined {
  const holding = new Set(placements.filter((m) => m.databaseId === db.id).map((m) => m.agentId));
  const fit = agents.filter((a) => hostState(a) === 'up' && !a.drainingAt && a.membersAcrossHosts && a.lastSeen !== null && now - a.lastSeen <= AGENT_SILENT_MS
    && servesRegion(a.region, db.region) && !holding.has(a.id));
  fit.sort((a, b) => (load.get(a.id) ?? 0) - (load.get(b.id) ?? 0) || a.id.localeCompare(b.id));
  return fit[0]?.id;
}

/**
 * Why a database whose members all ran on the lost host `lost` cannot be rebuilt elsewhere, or
 * null when it can: a 1-node database whose backups and archive are in an object store other
 * agents can share, and whose key the control plane holds (the objects are encrypted with it).
 */
export function unrecoverable(db: Pick<DatabaseRecord, 'clusterSize' | 'backupKey'>, lost: Pick<AgentRecord, 'backupStore'>): string | null {
  if (db.clusterSize !== 1) return 'only a 1-node database is rebuilt from the object store';
  if (!lost.backupStore) return 'its backups and binlog archive were in the lost host\'s state folder, not in a shared object store';
  if (!db.backupKey) return 'its agent never reported the key its objects in the store are encrypted with';
  return null;
}

/**
 * The agent a database under recovery is rebuilt on: a connected, reporting, not lost agent of
 * its region on the lost host's object store (`store`), least loaded first (ties by id). Pure.
 */
export function recoveryAgent(
  db: Pick<DatabaseRecord, 'region'>, store: string, agents: readonly AgentRecord[], load: ReadonlyMap<string, number>, now: number,
): string | undefined {
  if (!store) return undefined;
  const fit = agents.filter((a) => hostState(a) === 'up' && a.lastSeen !== null && now - a.lastSeen <= AGENT_SILENT_MS
    && servesRegion(a.region, db.region) && (a.backupStore ?? '') === store);
  fit.sort((a, b) => (load.get(a.id) ?? 0) - (load.get(b.id) ?? 0) || a.id.localeCompare(b.id));
  return fit[0]?.id;
}
