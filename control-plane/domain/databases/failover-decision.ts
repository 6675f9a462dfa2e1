/**
 * The control plane's failover decision for a cluster whose members run on different agents
 * (docs/databases.md, "Clusters across hosts"). Pure: the coordinator gathers what the agents
 * reported and the clock, this says whether to promote and whom.
 */

import { gtidContains } from '../../../lib/gtid.js';

/** How long the primary must stay lost before a replica is promoted. */
export const FAILOVER_AFTER_MS = 3000;
/**
 * An agent whose last report is older than this counts as gone even while its stream looks open
 * (agents send a heartbeat every 3 s; a cut link is noticed by the report gap or by keepalive,
 * whichever comes first).
 */
export const AGENT_SILENT_MS = 7000;
/**
 * A primary its agent reports `fenced` (read-only for a planned switchover, switchover.ts) is
 * lost only after this long: a switchover names the new primary or lifts the fence well within it
 * (SWITCHOVER_DEADLINE_MS), so a fence this old was abandoned (a control plane that died in the
 * middle) and the most advanced replica, which has every acknowledged write, is promoted.
 */
export const FENCE_ABANDONED_MS = 20_000;

/** One member as the control plane knows it from its agent's reports. */
export interface MemberView {
  member: number;
  agentId: string;
  /** The agent's stream is open. */
  agentConnected: boolean;
  /** When the agent last reported (ms), null when never. */
  agentSeenAt: number | null;
  /** What the agent last said of this member; undefined when it has not reported it. */
  node?: { state: string; role: string; gtid: string };
  /**
   * Placed on a new host and not caught up yet (MemberPlacement.seed): it may hold a half-prepared
   * base or still be applying its relay log, so the position it reports says nothing of which
   * acknowledged rows it holds, and it is never promoted.
   */
  seeding?: boolean;
}

export interface FailoverInput {
  clusterSize: number;
  term: number;
  primaryMember: number;
  /**
   * The GTID position the current primary was named for ('' = none known): every write
   * acknowledged up to that promotion, so a member that lacks it is never promoted.
   */
  primaryPosition?: string;
  members: MemberView[];
  /** When the primary was first seen lost (kept by the caller between decisions), else null. */
  lostSince: number | null;
}

export type FailoverDecision =
  | { kind: 'healthy' }
  /** The primary is lost but not for long enough yet. */
  | { kind: 'waiting'; lostSince: number; cause: string }
  /**
   * Lost for long enough, but no replica can take over (the cluster stays without a primary);
   * `seeding`: running replicas held back only because they are still being seeded.
   */
  | { kind: 'stuck'; lostSince: number; cause: string; seeding?: number[] }
  /** `position`: the GTID position the member is promoted for (its agent promotes it only once its node holds it). */
  | { kind: 'promote'; member: number; agentId: string; term: number; position: string; cause: string };

function agentAlive(m: MemberView, now: number): boolean {
  return m.agentConnected && m.agentSeenAt !== null && now - m.agentSeenAt <= AGENT_SILENT_MS;
}

/** Why the primary counts as lost, or null while it serves. */
function lostCause(p: MemberView | undefined, now: number): string | null {
  if (!p) return 'the primary member has no placement';
  if (!p.agentConnected) return `the agent ${p.agentId} of the primary is disconnected`;
  if (!agentAlive(p, now)) return `the agent ${p.agentId} of the primary has not reported for ${AGENT_SILENT_MS / 1000} s`;
  if (!p.node) return null; // not reported yet (a fresh control plane): no cause to act
  if (p.node.state !== 'running' || p.node.role === 'down') return `the agent ${p.agentId} reports the primary ${p.node.state === 'running' ? 'not answering' : p.node.state}`;
  if (p.node.role === 'fenced') return `the primary has been fenced for a planned switchover that did not finish`;
  // Its agent refuses to promote a node that lacks the position it was named for (a node wiped
  // or rebuilt behind it): another member that holds it is named instead.
  if (p.node.role === 'behind') return `the agent ${p.agentId} reports the primary lacks the position it was named for`;
  return null;
}

/**
 * MariaDB `gtid_current_pos` ("domain-server-seq,..."): the sequence number per replication
 * domain. Two positions compare by the sum over domains, which under gtid_strict_mode with the
 * one domain the agent uses is the plain sequence number.
 */
export function gtidProgress(pos: string): number {
  let total = 0;
  for (const part of pos.split(',')) {
    const m = /^\s*(\d+)-(\d+)-(\d+)\s*$/.exec(part);
    if (m) total += Number(m[3]);
  }
  return total;
}

/**
 * Decides one cluster. The primary is lost when its agent's stream is gone, its agent has been
 * silent too long, or its agent reports it down; after FAILOVER_AFTER_MS of that the most
 * advanced running replica on a live agent is promoted (ties: lowest member index) with the
 * term raised by one, for the position it reported (its agent checks its node still holds it
 * before promoting). A replica that lacks the position the current primary was named for is
 * never promoted, nor one still being seeded on a new host, however far its reported position:
 * a base restored at a position, or a relay log half applied, can report a position past rows it
 * does not hold. No such replica on a live agent: stuck, never a guess (the cluster waits without
 * a primary, and the cause names the members held back, rather than lose acknowledged rows).
 */
export function decideFailover(input: FailoverInput, now: number): FailoverDecision {
  if (input.clusterSize < 2) return { kind: 'healthy' };
  const primary = input.members.find((m) => m.member === input.primaryMember);
  const cause = lostCause(primary, now);
  if (cause === null) return { kind: 'healthy' };
  const lostSince = input.lostSince ?? now;
  const wait = primary?.node?.role === 'fenced' ? FENCE_ABANDONED_MS : FAILOVER_AFTER_MS;
  if (now - lostSince < wait) return { kind: 'waiting', lostSince, cause };
  const replicas = input.members
    .filter((m) => m.member !== input.primaryMember && agentAlive(m, now) && m.node?.state === 'running' && m.node.role === 'replica');
  const seeding = replicas.filter((m) => m.seeding).map((m) => m.member);
  const candidates = replicas.filter((m) => !m.seeding)
    .sort((a, b) => gtidProgress(b.node!.gtid) - gtidProgress(a.node!.gtid) || a.member - b.member);
  const floor = input.primaryPosition ?? '';
  const best = candidates.find((m) => gtidContains(m.node!.gtid, floor));
  if (!best) {
    const why = candidates.length === 0 ? 'no replica runs on a connected agent' : `no replica holds the position ${floor} the primary was named for`;
    const held = seeding.length === 0 ? ''
      : `; member ${seeding.join(', ')} is still being seeded on a new host and is not promoted before it has caught up (it may lack acknowledged rows)`;
    return { kind: 'stuck', lostSince, cause: `${cause}, and ${why}${held}`, ...(seeding.length > 0 ? { seeding } : {}) };
  }
  return { kind: 'promote', member: best.member, agentId: best.agentId, term: input.term + 1, position: best.node!.gtid, cause };
}
