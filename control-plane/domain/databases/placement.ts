import { FulcrumError } from '../../../lib/errors.js';
import { regionServed } from '../regions.js';
import type { DatabaseRepository } from './repository.js';
import { makeClusterSecrets } from './cluster-secrets.js';
import type { MemberPlacement } from './model.js';

/** Whether an agent of `agentRegion` may run a database of `dbRegion` (empty = any region). */
export function servesRegion(agentRegion: string, dbRegion: string): boolean {
  return agentRegion === '' || regionServed(agentRegion, dbRegion);
}

/** A connected agent as placement sees it. */
export interface PlacementAgent {
  id: string;
  region: string;
  /** It can run part of a cluster and replicate across hosts (AgentReport.members_across_hosts). */
  membersAcrossHosts?: boolean;
  /**
   * The identity of its backup store (AgentReport.backup_store: endpoint, bucket and prefix, never
   * credentials); '' or absent for local folders. Agents with the same identity share one store.
   */
  backupStore?: string;
}

/**
 * The agent a fork is placed on (every member there, as a fork has always been built on one
 * agent), or null to wait. A fork is built from its source's backups and archived binlogs:
 * - the source's agent when it is connected (the default: it can flush the source's binlog and
 *   start from a physical base, which an agent elsewhere cannot);
 * - when it is away, and its objects are in a shared object store whose key the fork's agent can
 *   be given (`crossAgent`), the least loaded connected agent of the region on that same store;
 * - otherwise none: the fork waits for the source's agent.
 * `candidates` are the connected agents serving the fork's region.
 */
export function forkAgent(
  source: { agentId: string | null; backupStore: string }, candidates: readonly PlacementAgent[], connected: readonly PlacementAgent[],
  load: (agent: string) => number, crossAgent: boolean,
): string | null {
  if (source.agentId !== null && connected.some((a) => a.id === source.agentId)) return source.agentId;
  if (crossAgent && source.backupStore !== '') {
    const sharing = candidates.filter((a) => a.backupStore === source.backupStore);
    if (sharing.length > 0) {
      const least = Math.min(...sharing.map((a) => load(a.id)));
      return sharing.find((a) => load(a.id) === least)!.id;
    }
  }
  return null;
}

/**
 * The agent of each member (index k-1 -> member k) of a new database, from candidates ordered
 * best first (least loaded). Anti-affinity: a cluster goes to as many distinct agents as can take
 * part of one, up to one per member; with fewer such agents the members wrap round them (three
 * members on two agents: 1 and 3 share the first). When fewer than two candidates can run part of
 * a cluster, the best candidate runs every member, as a single host always has.
 */
export function memberAgents(clusterSize: number, candidates: readonly PlacementAgent[]): string[] {
  const spreading = candidates.filter((a) => a.membersAcrossHosts);
  const pool = clusterSize > 1 && spreading.length > 1 ? spreading.slice(0, clusterSize) : candidates.slice(0, 1);
  return Array.from({ length: clusterSize }, (_, k) => pool[k % pool.length]!.id);
}

/**
 * Placement of databases on agents: every database not yet placed gets its members' agents from
 * the connected agents of its region, least loaded first (load = live databases with a member on
 * the agent; ties by id, so the choice is stable), and every member stays there for its life.
 * The database's reporting agent is member 1's (the first primary). Returns the placements made;
 * a database with no agent for its region waits for one to connect.
 */
export async function placeDatabases(repo: DatabaseRepository, connected: readonly PlacementAgent[]): Promise<{ database: number; agent: string; members: string[] }[]> {
  const placed: { database: number; agent: string; members: string[] }[] = [];
  const live = (await repo.list()).filter((x) => !x.deleting);
  const liveIds = new Set(live.map((x) => x.id));
  const load = new Map<string, Set<number>>();
  const count = (agent: string, db: number) => load.set(agent, (load.get(agent) ?? new Set()).add(db));
  for (const m of await repo.members()) if (liveIds.has(m.databaseId)) count(m.agentId, m.databaseId);
  // A database placed before member placements existed counts on its one agent.
  for (const x of live) if (x.agentId !== null) count(x.agentId, x.id);
  for (const db of live) {
    if (db.agentId !== null) continue;
    const candidates = connected.filter((a) => servesRegion(a.region, db.region));
    const size = (id: string) => load.get(id)?.size ?? 0;
    const ordered = [...candidates].sort((a, b) => size(a.id) - size(b.id) || a.id.localeCompare(b.id));
    if (db.fork) {
      // docs/databases.md, "Fork to a point in time": on the source's agent, or on any agent
      // sharing its object store.
      const source = await repo.get(db.fork.source);
      const sourceAgent = source?.agentId ?? null;
      const cross = crossAgentForks(source);
      // The source agent's store as last reported (it may be away now: its store is not).
      const backupStore = cross && sourceAgent !== null ? (await repo.agent(sourceAgent))?.backupStore ?? '' : '';
      const agent = forkAgent({ agentId: sourceAgent, backupStore }, ordered, connected, size, cross);
      if (agent === null) continue;
      const members = Array.from({ length: db.clusterSize ?? 1 }, () => agent);
      await repo.setMembers(db.id, members);
      // A 1-node fork gets its CA from here like any 1-node database (see below).
      await repo.update(db.id, { agentId: agent, primaryMember: 1, primaryPosition: '', ...(members.length === 1 ? { clusterSecrets: makeClusterSecrets(db.id) } : {}) });
      db.agentId = agent;
      count(agent, db.id);
      placed.push({ database: db.id, agent, members });
      continue;
    }
    if (candidates.length === 0) continue;
    const members = memberAgents(db.clusterSize ?? 1, ordered);
    await repo.setMembers(db.id, members);
    // Members on several agents share the cluster's CA and replication password, made here once.
    // A 1-node database gets its CA from here too, so that it keeps it when it is rebuilt on
    // another host after its own is lost (docs/multi-host.md, "A 1-node database on a lost host").
    const spread = new Set(members).size > 1;
    await repo.update(db.id, { agentId: members[0]!, primaryMember: 1, primaryPosition: '', ...(spread || members.length === 1 ? { clusterSecrets: makeClusterSecrets(db.id) } : {}) });
    db.agentId = members[0]!;
    for (const a of members) count(a, db.id);
    placed.push({ database: db.id, agent: members[0]!, members });
  }
  return placed;
}

/**
 * A fork may be built away from its source's agent only when the control plane holds the source's
 * backup key (reported by the source's agent) to hand to the fork's agent: without it the
 * encrypted objects could not be read there.
 */
function crossAgentForks(source: { backupKey?: string | null } | undefined): boolean {
  return !!source?.backupKey;
}

/** Whether a database's members run on more than one agent (the control plane then decides failover). */
export function spansAgents(members: readonly { agentId?: string }[]): boolean {
  return new Set(members.map((m) => m.agentId)).size > 1;
}

/**
 * Refuses (400) a change that would start a rollout while a host holding a member of the database
 * drains: the drain moves members and switches over on its own, and a rollout would count on
 * members that are leaving. A drain is refused the same way while a rollout runs (host-drain.ts).
 */
export async function refuseWhileDraining(repo: DatabaseRepository, members: readonly MemberPlacement[]): Promise<void> {
  const agents = await repo.agents();
  const draining = [...new Set(members.map((m) => m.agentId))].filter((a) => agents.some((x) => x.id === a && x.drainingAt)).sort();
  if (draining.length > 0) {
    throw FulcrumError.conflict(`Your database has a member on a host being drained (agent ${draining.join(', agent ')}); a change that restarts its members can be made once the drain is done.`);
  }
}

/**
 * Refuses (400) the suspend of a cluster spread over hosts while one of its members is being
 * moved: placed nowhere, being seeded on a new host, on a lost host, or on a draining one. Host
 * healing and the drain leave a suspended database alone, so suspending it then would freeze the
 * move half done (a member on a lost host cannot even be stopped). It can be suspended once the
 * member is re-placed and has caught up (docs/multi-host.md, "Patch, suspend and resume across hosts").
 */
export async function refuseSuspendWhileMoving(repo: DatabaseRepository, databaseId: number): Promise<void> {
  const members = await repo.members(databaseId);
  if (!spansAgents(members)) return;
  const agents = await repo.agents();
  const moving = [...new Set(members.filter((m) => {
    const a = agents.find((x) => x.id === m.agentId);
    return !a || a.drainingAt || (a.lostAt !== null && a.lostAt !== undefined) || m.seed !== undefined;
  }).map((m) => m.agentId || 'none'))].sort();
  if (moving.length > 0) {
    throw FulcrumError.conflict(`Your database has a member being moved to another host (from agent ${moving.join(', agent ')}: lost, draining or seeding); it can be suspended once every member runs on a host again.`);
  }
}
