import type { EventService } from '../events/event-service.js';
import type { EventRecord } from '../events/model.js';
import type { DatabaseRepository } from './repository.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport } from './model.js';
import { fromPlacedAgent } from './report-scope.js';
import { hostState, type HostState } from './host-healing.js';

/** One member an agent host runs, as the console's Fleet page lists it. */
export interface HostMember {
  databaseId: number;
  /** The tenant's label: any text, escaped by whoever renders it. */
  label: string;
  /** 1..cluster_size (node k). */
  member: number;
  role: 'primary' | 'replica';
  /** The member's state as its own agent last reported it (running, stopped, ...); null before any report. */
  status: string | null;
}

/** An agent as GET /v4/fulcrum/agents gives it: the stored record, its state, its members and its newest events. */
export type HostOverviewView = AgentRecord & {
  lostAt: number | null; state: HostState; members: HostMember[]; recentEvents: EventRecord[];
  /** The host is draining (docs/multi-host.md, "Draining a host"), since `drainingAt` (ms). */
  draining: boolean;
  drainingAt: number | null;
  /** A drain's progress while it drains (members still placed on the host; 0: done), else null. */
  drain: { membersLeft: number } | null;
};

/**
 * How many of the newest events are read to find each host's: the page is polled every few
 * seconds, so it reads a bounded page rather than the whole retained log.
 */
export const HOST_EVENTS_SCANNED = 200;
/** Events kept per host, newest first. */
export const HOST_EVENTS_KEPT = 5;

/**
 * Whether an event is about agent host `id`. There is no event about a host itself (docs/multi-host.md,
 * "A lost host": events carry a database, and events without an entity are shown to restricted
 * users), so a host's events are the database events recorded with it among their `hosts` (the
 * healing round, drains, moves, switchovers, failovers and rollouts name the hosts they act on).
 * Read from that field, never from the message: a tenant's label or an agent's text could spell
 * "agent ID" too.
 */
export function aboutHost(e: Pick<EventRecord, 'hosts'>, id: string): boolean {
  return e.hosts?.includes(id) ?? false;
}

/**
 * Each host's members: every placed member of a live database, with its role (what its own agent
 * reported, else what the control plane named: the database's primary member) and its reported
 * state. Members placed nowhere (waiting for a host) belong to no host. Pure.
 */
export function membersByHost(dbs: readonly DatabaseRecord[], placements: readonly MemberPlacement[], reports: readonly MemberReport[]): Map<string, HostMember[]> {
  const live = new Map(dbs.filter((d) => !d.deleting).map((d) => [d.id, d]));
  const current = new Map(reports.filter(fromPlacedAgent(placements)).map((r) => [`${r.databaseId}:${r.member}`, r]));
  const out = new Map<string, HostMember[]>();
  for (const m of placements) {
    const db = live.get(m.databaseId);
    if (!db || m.agentId === '') continue;
    const r = current.get(`${m.databaseId}:${m.member}`);
    const reported = r?.role === 'primary' || r?.role === 'replica' ? r.role : undefined;
    const row: HostMember = {
      databaseId: db.id, label: db.label, member: m.member,
      role: reported ?? (m.member === db.primaryMember ? 'primary' : 'replica'),
      status: r?.state || null,
    };
    out.set(m.agentId, [...(out.get(m.agentId) ?? []), row]);
  }
  return out;
}

/**
 * The agents API's view of the fleet (GET /v4/fulcrum/agents, unrestricted users only): each
 * agent with its host state, the members it runs and the newest events that name it.
 */
export class HostOverview {
  constructor(private readonly d: { repo: Pick<DatabaseRepository, 'agents' | 'list' | 'members' | 'memberReports'>; events: Pick<EventService, 'page'> }) {}

  async agents(): Promise<HostOverviewView[]> {
    const [agents, dbs, placements, reports, newest] = await Promise.all([
      this.d.repo.agents(), this.d.repo.list(), this.d.repo.members(), this.d.repo.memberReports(), this.d.events.page({}, 0, HOST_EVENTS_SCANNED),
    ]);
    const members = membersByHost(dbs, placements, reports);
    return agents.map((a) => ({
      ...a,
      lostAt: a.lostAt ?? null,
      state: hostState(a),
      members: members.get(a.id) ?? [],
      draining: !!a.drainingAt,
      drainingAt: a.drainingAt ?? null,
      drain: a.drainingAt ? { membersLeft: members.get(a.id)?.length ?? 0 } : null,
      recentEvents: newest.events.filter((e) => aboutHost(e, a.id)).slice(0, HOST_EVENTS_KEPT),
    }));
  }
}
