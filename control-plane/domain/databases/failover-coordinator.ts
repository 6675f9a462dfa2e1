import { Counter, Gauge, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import { AGENT_SILENT_MS, decideFailover, type FailoverDecision, type MemberView } from './failover-decision.js';
import { spansAgents } from './placement.js';
import type { MemberPlacement, MemberReport } from './model.js';
import { fromPlacedAgent } from './report-scope.js';
import { resumeGrace } from './resume-grace.js';

/** One node as an agent reports it (transport-neutral part of NodeObservation). */
export interface ReportedNode {
  /** Member index, 0 when the agent did not say. */
  member: number;
  state: string;
  role: string;
  gtid: string;
  /** address:port where the member listens. */
  address: string;
}

/** Where a cluster's primary is, for the endpoint routing (hosts.primary follows it). */
export interface PrimaryLocation {
  databaseId: number;
  term: number;
  member: number;
  agentId: string;
  /** address:port as the member's agent reported it; empty until it has. */
  address: string;
}

/** Each current member's report of one database, by member index (docs/databases.md, "Whose report counts"). */
export function currentReports(placements: readonly MemberPlacement[], reports: readonly MemberReport[]): Map<number, MemberReport> {
  return new Map(reports.filter(fromPlacedAgent(placements)).map((r) => [r.member, r]));
}

/**
 * Failover of clusters whose members run on different agents (docs/databases.md, "Clusters across
 * hosts"): no one agent sees the whole cluster, so the control plane decides. What each agent
 * last said of its own members is kept in the store, written by whichever replica the agent
 * reports to, so the replica holding the lease decides from every agent's reports; after a start
 * it waits AGENT_SILENT_MS for fresh ones. On every tick it runs decideFailover; a promotion raises the term, names the new primary member, makes its agent the
 * one that reports the database, and records a `database_failover` event. The new desired roles
 * reach the agents through the next push round (the caller's onChange).
 */
export class FailoverCoordinator {
  private readonly lostSince = new Map<number, number>();
  /** Clusters already logged as having no replica to promote (logged once per loss). */
  private readonly stuck = new Set<number>();
  private readonly log: Logger;

  private readonly startedAt: number;

  private readonly promoted: Counter;

  constructor(private readonly d: { repo: DatabaseRepository; events: EventService; clock: Clock; logger: Logger; registry: Registry }) {
    this.log = d.logger.child({ component: 'database-failover' });
    this.startedAt = d.clock.now();
    this.promoted = new Counter({ name: 'fulcrum_database_failovers_total', help: 'Primaries named by the control plane for clusters spread over agents', registers: [d.registry] });
    const lost = this.lostSince;
    new Gauge({
      name: 'fulcrum_database_primary_lost', help: 'Clusters spread over agents whose primary is lost right now (waiting or with no replica to promote)', registers: [d.registry],
      collect() {
        this.set(lost.size);
      },
    });
  }

  /**
   * An agent's report: kept only for members placed on that agent (an agent speaks for its own).
   * True when a member's address is new or moved (its peers on other agents replicate from it).
   */
  async record(agentId: string, databases: { id: number; nodes: ReportedNode[] }[]): Promise<boolean> {
    let moved = false;
    for (const db of databases) {
      // Most reports change nothing and open no transaction.
      if ((await this.changes(agentId, db)).writes.length === 0) continue;
      // The placements are read again with the writes in one transaction: a report racing a scale
      // down cannot bring back a row the scale removed (docs/databases.md, "Scaling").
      moved = (await this.d.repo.transaction(async () => {
        const now = await this.changes(agentId, db);
        for (const r of now.writes) await this.d.repo.putMemberReport(r);
        return now.moved;
      })) || moved;
    }
    return moved;
  }

  /** The rows an agent's report of one database changes, and whether a member's address moved. */
  private async changes(agentId: string, db: { id: number; nodes: ReportedNode[] }): Promise<{ writes: MemberReport[]; moved: boolean }> {
    const mine = new Set((await this.d.repo.members(db.id)).filter((m) => m.agentId === agentId).map((m) => m.member));
    if (mine.size === 0) return { writes: [], moved: false };
    const known = new Map((await this.d.repo.memberReports(db.id)).map((r) => [r.member, r]));
    const writes: MemberReport[] = [];
    let moved = false;
    for (const n of db.nodes) {
      if (!mine.has(n.member)) continue;
      const was = known.get(n.member);
      if (n.address && was?.address !== n.address) moved = true;
      // Written once per change, not per heartbeat (the agent's liveness is its own row's).
      if (was && was.agentId === agentId && was.state === n.state && was.role === n.role && was.gtid === n.gtid && was.address === n.address) continue;
      writes.push({ databaseId: db.id, member: n.member, agentId, state: n.state, role: n.role, gtid: n.gtid, address: n.address, reported: this.d.clock.now() });
    }
    return { writes, moved };
  }

  /** Runs the decision for every spread cluster; true when a primary was named (push again). */
  async tick(): Promise<boolean> {
    const now = this.d.clock.now();
    // A control plane that just started has not heard from its agents yet (they reconnect with
    // backoff); a primary agent that is merely slower to reconnect is no reason to fail over.
    if (now - this.startedAt < AGENT_SILENT_MS) return false;
    let changed = false;
    const live = new Set<number>();
    for (const db of await this.d.repo.list()) {
      if (db.deleting || db.runState !== 'running' || !db.provisioned) continue;
      // Suspended (above) or just resumed: its members are down on purpose, not lost.
      if (resumeGrace(db, now)) continue;
      const placements = await this.d.repo.members(db.id);
      if (!spansAgents(placements)) continue;
      live.add(db.id);
      // Only what the member's own agent said counts (a member never moves agents).
      const reports = currentReports(placements, await this.d.repo.memberReports(db.id));
      const members: MemberView[] = await Promise.all(placements.map(async (m) => {
        const agent = await this.d.repo.agent(m.agentId);
        const node = reports.get(m.member);
        return { member: m.member, agentId: m.agentId, agentConnected: !!agent?.connected, agentSeenAt: agent?.lastSeen ?? null, node, seeding: m.seed !== undefined };
      }));
      const decision = decideFailover({ clusterSize: db.clusterSize, term: db.term, primaryMember: db.primaryMember, primaryPosition: db.primaryPosition ?? '', members, lostSince: this.lostSince.get(db.id) ?? null }, now);
      changed = (await this.apply(db.id, decision)) || changed;
      changed = (await this.syncMembers(db.id)) || changed;
    }
    for (const id of [...this.lostSince.keys()]) if (!live.has(id)) this.lostSince.delete(id);
    return changed;
  }

  /** The current primary of a spread cluster, or undefined (one agent runs it all, or unknown). */
  async primaryOf(databaseId: number): Promise<PrimaryLocation | undefined> {
    const db = await this.d.repo.get(databaseId);
    if (!db || db.deleting) return undefined;
    const placements = await this.d.repo.members(databaseId);
    const placement = placements.find((m) => m.member === db.primaryMember);
    if (!placement) return undefined;
    const address = currentReports(placements, await this.d.repo.memberReports(databaseId)).get(db.primaryMember)?.address ?? '';
    return { databaseId, term: db.term, member: db.primaryMember, agentId: placement.agentId, address };
  }

  /**
   * The API's `members` (address -> primary | failover) of a spread cluster, assembled from every
   * agent's report with the primary the control plane named: no one agent can report it, and the
   * endpoint routing reads it (hosts.primary follows the named primary at once). A member still
   * being seeded on a new host is left out until it has caught up: it holds only part of the
   * data, so it is no failover yet and hosts.secondary must not send reads to it (the database is
   * `degraded` meanwhile).
   */
  private async syncMembers(id: number): Promise<boolean> {
    const db = await this.d.repo.get(id);
    if (!db) return false;
    const members: Record<string, string> = {};
    const placements = await this.d.repo.members(id);
    const reports = currentReports(placements, await this.d.repo.memberReports(id));
    for (const m of placements) {
      if (m.seed !== undefined && m.member !== db.primaryMember) continue;
      const address = reports.get(m.member)?.address ?? '';
      const host = address.slice(0, Math.max(0, address.lastIndexOf(':')));
      if (host) members[host] = m.member === db.primaryMember ? 'primary' : 'failover';
    }
    if (Object.keys(members).length === 0 || JSON.stringify(members) === JSON.stringify(db.members)) return false;
    await this.d.repo.update(id, { members });
    return true;
  }

  private async recordHeldBack(id: number, cause: string): Promise<void> {
    const db = await this.d.repo.get(id);
    if (!db) return;
    const message = `No primary: ${cause}. The database stays degraded without a primary until a member that holds every acknowledged write can be promoted.`;
    await this.d.events.record('database_degraded', databaseRef(db), { status: 'notification', message });
  }

  private async apply(id: number, decision: FailoverDecision): Promise<boolean> {
    switch (decision.kind) {
      case 'healthy':
        this.lostSince.delete(id);
        this.stuck.delete(id);
        return false;
      case 'waiting':
      case 'stuck':
        if (!this.lostSince.has(id)) this.log.warn({ database: id, cause: decision.cause }, 'database primary lost');
        if (decision.kind === 'stuck' && !this.stuck.has(id)) {
          this.log.error({ database: id, cause: decision.cause }, 'no replica can be promoted');
          // Said to the customer too when a member was held back for its seeding: otherwise the
          // database reads degraded with no word on why it has no primary.
          if (decision.seeding) await this.recordHeldBack(id, decision.cause);
        }
        if (decision.kind === 'stuck') this.stuck.add(id);
        this.lostSince.set(id, decision.lostSince);
        return false;
      case 'promote': {
        this.lostSince.delete(id);
        this.stuck.delete(id);
        // The metric and the log follow the commit: a store may run the transaction again.
        const promoted = await this.d.repo.transaction(async () => {
          const db = await this.d.repo.get(id);
          if (!db || db.term >= decision.term) return false;
          await this.d.repo.update(id, { term: decision.term, primaryMember: decision.member, primaryPosition: decision.position, agentId: decision.agentId, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
          const message = `Member ${decision.member} on agent ${decision.agentId} promoted to primary (term ${decision.term}): ${decision.cause}.`;
          // The cause may name the old primary's agent (failover-decision.ts, lostCause).
          await this.d.events.record('database_failover', databaseRef(db), { status: 'notification', message, hosts: [decision.agentId, db.agentId ?? ''] });
          return true;
        });
        if (promoted) {
          this.promoted.inc();
          this.log.warn({ database: id, member: decision.member, agent: decision.agentId, term: decision.term, position: decision.position, cause: decision.cause }, 'database failover');
        }
        return promoted;
      }
    }
  }
}
