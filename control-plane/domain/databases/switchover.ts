import { randomUUID } from 'node:crypto';
import { Counter, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import { AGENT_SILENT_MS, gtidProgress } from './failover-decision.js';
import { currentReports } from './failover-coordinator.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport, OperationRecord } from './model.js';

/**
 * How long a planned switchover may take from the fence to the new primary named; past it the
 * fence is lifted and the old primary serves again. Well under FENCE_ABANDONED_MS, after which
 * the failover coordinator takes a fenced primary for lost.
 */
export const SWITCHOVER_DEADLINE_MS = 10_000;
/** How long the target may take to apply the fenced primary's position (part of the deadline). */
export const CATCH_UP_TIMEOUT_MS = 5000;
/** How often the store is read for an operation's result (reports reach any replica's store). */
const POLL_MS = 25;

/** The longest GTID position a fence may answer (one entry per replication domain). */
const POSITION_MAX = 1024;
const POSITION = /^\d{1,10}-\d{1,10}-\d{1,20}(,\d{1,10}-\d{1,10}-\d{1,20})*$/;

/**
 * A fence's answer as the store keeps it: a MariaDB GTID position ("domain-server-seq", comma
 * separated), or null for anything else an agent sent (too long, or not a position). Pure.
 */
export function fencePosition(text: string | undefined): string | null {
  return text && text.length <= POSITION_MAX && POSITION.test(text) ? text : null;
}

/** The member a planned switchover names primary, and its agent. */
export interface SwitchoverTarget {
  member: number;
  agentId: string;
}

/**
 * The member to switch a spread cluster's primary over to, pure: a running replica, not being
 * seeded, on an agent that is up, reporting, not lost, not draining and not in `avoid`, the most advanced first
 * (ties: lowest member). Undefined when none fits (the switchover is not started).
 */
export function switchoverTarget(
  db: Pick<DatabaseRecord, 'primaryMember'>, placements: readonly MemberPlacement[], reports: readonly MemberReport[],
  agents: readonly AgentRecord[], now: number, avoid: ReadonlySet<string> = new Set(),
): SwitchoverTarget | undefined {
  const current = currentReports(placements, reports);
  const fit = placements.filter((m) => {
    // A member still being seeded on a new host may lack rows below the position it reports.
    if (m.member === db.primaryMember || avoid.has(m.agentId) || m.seed !== undefined) return false;
    const a = agents.find((x) => x.id === m.agentId);
    if (!a || !a.connected || a.lostAt || a.drainingAt || a.lastSeen === null || now - a.lastSeen > AGENT_SILENT_MS) return false;
    const r = current.get(m.member);
    return r?.state === 'running' && r.role === 'replica';
  });
  fit.sort((a, b) => gtidProgress(current.get(b.member)!.gtid) - gtidProgress(current.get(a.member)!.gtid) || a.member - b.member);
  const best = fit[0];
  return best ? { member: best.member, agentId: best.agentId } : undefined;
}

/** How a switchover ended. */
export type SwitchoverOutcome =
  | { kind: 'switched'; term: number; member: number; agentId: string; pauseMs: number }
  | { kind: 'abandoned'; reason: string };

/**
 * Whether the cluster is still as the switchover found it, pure: same term, same primary, the
 * target still placed where it was. Anything else (a failover, a scale, a delete) means another
 * decision was made meanwhile and the switchover names nobody.
 */
export function stillAsFound(
  db: Pick<DatabaseRecord, 'term' | 'primaryMember' | 'deleting'> | undefined, placements: readonly MemberPlacement[],
  found: { term: number; primary: number }, target: SwitchoverTarget,
): boolean {
  if (!db || db.deleting || db.term !== found.term || db.primaryMember !== found.primary) return false;
  return placements.some((m) => m.member === target.member && m.agentId === target.agentId);
}

/**
 * Stores an operation addressed to one agent (`payload.agent`), pushes it, and waits for its
 * result in the store (written by whichever replica the agent reports to). Past `deadline` it is
 * ended as failed so it is no longer sent (`allowedMs` is what the error says it had).
 */
export async function agentOperation(
  d: Pick<SwitchoverDeps, 'repo' | 'clock' | 'onChange'>, databaseId: number, kind: 'fence' | 'catchUp', payload: Record<string, unknown>,
  deadline: number, allowedMs: number,
): Promise<OperationRecord> {
  const id = randomUUID();
  await d.repo.createOperation({ id, databaseId, kind, payload, eventId: null, state: 'pending', error: null, created: d.clock.now() });
  d.onChange();
  for (;;) {
    const op = await d.repo.operation(id);
    if (!op) return { id, databaseId, kind, payload, eventId: null, state: 'failed', error: 'was removed', created: 0 };
    if (op.state !== 'pending') return op;
    if (d.clock.now() >= deadline) {
      await d.repo.finishOperation(id, 'failed', `did not answer within ${allowedMs / 1000} s`);
      d.onChange();
      return { ...op, state: 'failed', error: `did not answer within ${allowedMs / 1000} s` };
    }
    await d.clock.sleep(POLL_MS);
  }
}

export interface SwitchoverDeps {
  repo: DatabaseRepository;
  events: EventService;
  clock: Clock;
  logger: Logger;
  registry?: Registry;
  /** The store changed (an operation or a new term): push to the agents and data planes. */
  onChange: () => void;
}

/**
 * The planned switchover of a cluster spread over agents (docs/multi-host.md, "Planned
 * switchover"), run by the lease holder. Three steps over the agents' existing streams, each an
 * operation addressed to one agent whose result comes back in that agent's report:
 *
 * 1. *Fence* (FenceOp to the primary's agent): the primary goes read-only at the current term
 *    (commits in flight finish, acknowledged) and stays so until a higher term; the agent answers
 *    with its GTID position.
 * 2. *Catch up* (CatchUpOp to the target's agent): the target waits until it has applied that
 *    position.
 * 3. *Name*: in one store transaction, if nothing else changed the cluster meanwhile, the term is
 *    raised and the target named primary; the push makes its agent promote it, the data planes
 *    route `hosts.primary` to it, and the old primary's agent makes it a replica (it has no
 *    transaction the target lacks).
 *
 * Any step that fails or runs past SWITCHOVER_DEADLINE_MS abandons it: the term is raised with
 * the same primary and the fence's term named abandoned, which lifts the fence (the old primary
 * is writable again). No acknowledged
 * write is lost either way: the target has applied everything the fenced primary committed.
 */
export class Switchover {
  private readonly log: Logger;
  private readonly running = new Set<number>();
  private readonly total?: Counter;

  constructor(private readonly d: SwitchoverDeps) {
    this.log = d.logger.child({ component: 'switchover' });
    if (d.registry) {
      this.total = new Counter({ name: 'fulcrum_database_switchovers_total', help: 'Planned switchovers of clusters spread over agents, by result', labelNames: ['result'], registers: [d.registry] });
    }
  }

  /** A switchover of this database is under way in this process. */
  busy(databaseId: number): boolean {
    return this.running.has(databaseId);
  }

  /** Switches the primary of `databaseId` over to `target`; `why` goes into the events. */
  async run(databaseId: number, target: SwitchoverTarget, why: string): Promise<SwitchoverOutcome> {
    if (this.running.has(databaseId)) return { kind: 'abandoned', reason: 'a switchover of this database is already under way' };
    this.running.add(databaseId);
    try {
      const out = await this.steps(databaseId, target, why);
      this.total?.inc({ result: out.kind });
      return out;
    } finally {
      this.running.delete(databaseId);
    }
  }

  private async steps(databaseId: number, target: SwitchoverTarget, why: string): Promise<SwitchoverOutcome> {
    const db = await this.d.repo.get(databaseId);
    if (!db || db.deleting) return { kind: 'abandoned', reason: 'the database is gone' };
    const placements = await this.d.repo.members(databaseId);
    const old = placements.find((m) => m.member === db.primaryMember);
    if (!old) return { kind: 'abandoned', reason: 'the primary has no placement' };
    const found = { term: db.term, primary: db.primaryMember };
    const start = this.d.clock.now();
    const deadline = start + SWITCHOVER_DEADLINE_MS;
    await this.d.events.record('database_update', databaseRef(db), {
      status: 'notification',
      message: `Planned switchover (${why}): member ${db.primaryMember} on agent ${old.agentId} is fenced, then member ${target.member} on agent ${target.agentId} is named primary once it has applied every write.`,
      hosts: [old.agentId, target.agentId],
    });
    this.log.info({ database: databaseId, from: db.primaryMember, to: target.member, term: db.term }, 'planned switchover started');

    const fence = await this.operation(databaseId, 'fence', { agent: old.agentId, term: db.term, member: db.primaryMember }, deadline);
    if (fence.state !== 'done' || !fence.output) return this.abandon(db, found, `the fence of member ${db.primaryMember} ${fence.error ?? 'did not answer in time'}`);
    const fencedAt = this.d.clock.now();
    const position = fence.output;
    const caughtUp = await this.operation(databaseId, 'catchUp', { agent: target.agentId, member: target.member, position, timeout_ms: Math.min(CATCH_UP_TIMEOUT_MS, Math.max(1000, deadline - this.d.clock.now())) }, deadline);
    if (caughtUp.state !== 'done') return this.abandon(db, found, `member ${target.member} ${caughtUp.error ?? 'did not apply the position in time'}`);

    const term = found.term + 1;
    const named = await this.d.repo.transaction(async () => {
      const now = await this.d.repo.get(databaseId);
      if (!stillAsFound(now, await this.d.repo.members(databaseId), found, target)) return false;
      // The fenced primary's position: the new primary's agent promotes it only once it holds it.
      await this.d.repo.update(databaseId, { term, primaryMember: target.member, primaryPosition: position, agentId: target.agentId, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
      return true;
    });
    if (!named) return { kind: 'abandoned', reason: 'the cluster changed during the switchover (a failover, a scale or a delete)' };
    this.d.onChange();
    const pauseMs = this.d.clock.now() - fencedAt;
    const message = `Member ${target.member} on agent ${target.agentId} named primary (term ${term}) by a planned switchover (${why}): it had applied member ${found.primary}'s position ${position}; writes were refused for ${pauseMs} ms before the new primary was named.`;
    await this.d.events.record('database_failover', databaseRef(db), { status: 'notification', message, hosts: [target.agentId, old.agentId] });
    this.log.warn({ database: databaseId, from: found.primary, to: target.member, agent: target.agentId, term, position, pauseMs }, 'planned switchover');
    return { kind: 'switched', term, member: target.member, agentId: target.agentId, pauseMs };
  }

  /**
   * Stores an operation addressed to one agent, pushes it, and waits for its result in the store
   * (written by whichever replica the agent reports to). Past the deadline it is ended as failed
   * so it is no longer sent; an agent that ran it anyway is overruled by the term (see abandon).
   */
  private async operation(databaseId: number, kind: 'fence' | 'catchUp', payload: Record<string, unknown>, deadline: number): Promise<OperationRecord> {
    return agentOperation(this.d, databaseId, kind, payload, deadline, SWITCHOVER_DEADLINE_MS);
  }

  /**
   * Lifts the fence: a higher term with the same primary and the fenced term named abandoned (the
   * agent then promotes its primary again). Only when nothing else raised the term.
   */
  private async abandon(db: DatabaseRecord, found: { term: number; primary: number }, reason: string): Promise<SwitchoverOutcome> {
    const lifted = await this.d.repo.transaction(async () => {
      const now = await this.d.repo.get(db.id);
      if (!now || now.deleting || now.term !== found.term || now.primaryMember !== found.primary) return false;
      // Said explicitly: a higher term alone does not lift a fence (another decision may have
      // raised it), only the word that the fence of `found.term` is abandoned.
      await this.d.repo.update(db.id, { term: found.term + 1, fenceLiftedTerm: found.term, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
      return true;
    });
    if (lifted) this.d.onChange();
    const message = `Planned switchover abandoned: ${reason}. Member ${found.primary} stays primary${lifted ? ` (term ${found.term + 1})` : ''}.`;
    await this.d.events.record('database_update', databaseRef(db), { status: 'failed', message });
    this.log.warn({ database: db.id, primary: found.primary, reason }, 'planned switchover abandoned');
    return { kind: 'abandoned', reason };
  }
}
