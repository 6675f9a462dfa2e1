import { Gauge, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import { FulcrumError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import { AGENT_SILENT_MS } from './failover-decision.js';
import { currentReports } from './failover-coordinator.js';
import { hostState, type HostHealing } from './host-healing.js';
import { servesRegion, spansAgents } from './placement.js';
import { moveRefusal, moveTarget, type SingleMove } from './single-move.js';
import { switchoverTarget, type Switchover } from './switchover.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport } from './model.js';

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
/**
 * After an abandoned switchover the drain waits this long before it fences the same primary
 * again: each try refuses writes for up to SWITCHOVER_DEADLINE_MS, so a target that cannot catch
 * up must not turn a drain into a write outage every few seconds.
 */
export const SWITCHOVER_RETRY_MS = 60_000;

/** A host's drain as operators see it (GET /v4/fulcrum/agents, POST .../drain). */
export interface DrainView {
  id: string;
  draining: boolean;
  /** When the drain began (ms), null when not draining. */
  drainingAt: number | null;
  /** Members of live databases still placed on the host. */
  membersLeft: number;
}

/** Members of live databases placed on `agentId`. */
export function membersOn(agentId: string, dbs: readonly DatabaseRecord[], placements: readonly MemberPlacement[]): number {
  const live = new Set(dbs.filter((x) => !x.deleting).map((x) => x.id));
  return placements.filter((m) => m.agentId === agentId && live.has(m.databaseId)).length;
}

/**
 * Why a drain of `agentId` cannot be done, one line per database; empty when it can. Pure. Every
 * member on the host needs another host to go to: an agent of the database's region that is up,
 * reporting, not lost, not draining, able to run part of a cluster and holding no member of that
 * database (members on hosts already draining count too: they need one each). A 1-node database
 * moves through the object store (single-move.ts): the host needs one shared with another agent
 * that is free to take it. A cluster whose members all run on the host cannot be moved: that is
 * not built, so the drain is refused rather than left half done. A database in the middle of a
 * rolling change (`rolling`: rollout.ts restarts its members one by one and switches over) is
 * refused too: the drain would move members the rollout is counting on.
 */
export function drainRefusals(
  agentId: string, dbs: readonly DatabaseRecord[], placements: readonly MemberPlacement[], agents: readonly AgentRecord[], now: number,
  rolling: ReadonlySet<number> = new Set(),
): string[] {
  const out: string[] = [];
  for (const db of dbs) {
    if (db.deleting) continue;
    const mine = placements.filter((m) => m.databaseId === db.id);
    const here = mine.filter((m) => m.agentId === agentId);
    if (here.length === 0) continue;
    if (rolling.has(db.id)) {
      out.push(`database ${db.id} (${db.label}) has a rolling change under way (a resize, version upgrade or engine_config change restarting its members one by one); drain the host once it is done`);
      continue;
    }
    if (!spansAgents(mine)) {
      const from = agents.find((a) => a.id === agentId);
      const why = from ? moveRefusal(db, from, agents, now) : `database ${db.id} (${db.label}) runs on an unknown agent`;
      if (why) out.push(why);
      continue;
    }
    const holding = new Set(mine.map((m) => m.agentId));
    // Members on hosts already draining need a free host too: two drains must not count one twice.
    const draining = new Set(agents.filter((a) => a.drainingAt).map((a) => a.id));
    const leaving = mine.filter((m) => m.agentId === agentId || draining.has(m.agentId));
    const free = agents.filter((a) => a.id !== agentId && hostState(a) === 'up' && !a.drainingAt && a.membersAcrossHosts
      && a.lastSeen !== null && now - a.lastSeen <= AGENT_SILENT_MS && servesRegion(a.region, db.region) && !holding.has(a.id));
    if (free.length < leaving.length) {
      out.push(`database ${db.id} (${db.label}) has no other host to go to: no connected agent of region ${db.region} that can run part of a cluster is free of its members`);
    }
  }
  return out;
}

/** What the drain round does next for one database with a member on a draining host. Pure. */
export type DrainStep =
  | { kind: 'wait'; why: string }
  | { kind: 'move'; member: number }
  | { kind: 'switchover' }
  /** A 1-node database: moved whole through the object store (single-move.ts). */
  | { kind: 'relocate' };

/**
 * The next step for `db` on the draining host `agentId`: replicas first (each moved while the
 * primary serves from elsewhere and no other member is on its way), then the primary, switched
 * over once every other member is a running replica on a host that is not draining; after that
 * the old primary is a replica and moves like one.
 */
export function drainStep(
  agentId: string, db: Pick<DatabaseRecord, 'id' | 'primaryMember' | 'runState' | 'provisioned' | 'clusterSize' | 'recovery'>, placements: readonly MemberPlacement[],
  reports: readonly MemberReport[], draining: ReadonlySet<string>, seeding: (member: number) => boolean,
): DrainStep {
  if (db.runState !== 'running' || !db.provisioned) return { kind: 'wait', why: 'the database is not running' };
  const mine = placements.filter((m) => m.databaseId === db.id);
  if (db.clusterSize === 1 && !spansAgents(mine)) {
    if (db.recovery) return { kind: 'wait', why: 'the database is being rebuilt from the object store' };
    const node = currentReports(mine, reports).get(1);
    if (node && node.state !== 'running') return { kind: 'wait', why: 'its node is not running' };
    return { kind: 'relocate' };
  }
  const current = currentReports(mine, reports);
  const others = mine.filter((m) => m.agentId !== agentId);
  // Members on their way (placed nowhere, or seeding) are waited for: one move at a time.
  const settling = others.find((m) => m.agentId === '' || seeding(m.member) || current.get(m.member)?.state !== 'running');
  if (settling) return { kind: 'wait', why: `member ${settling.member} is not running yet` };
  const here = mine.filter((m) => m.agentId === agentId);
  const replica = here.find((m) => m.member !== db.primaryMember);
  const primary = current.get(db.primaryMember);
  if (replica) {
    if (here.some((m) => m.member === db.primaryMember)) {
      // Both on the draining host can only be a database that is not spread: refused up front.
      return { kind: 'wait', why: 'the primary is on the draining host too' };
    }
    if (primary?.role !== 'primary') return { kind: 'wait', why: 'the primary does not serve' };
    return { kind: 'move', member: replica.member };
  }
  if (!here.some((m) => m.member === db.primaryMember)) return { kind: 'wait', why: 'nothing on the host' };
  const ready = others.every((m) => !draining.has(m.agentId) && current.get(m.member)?.role === 'replica');
  if (!ready) return { kind: 'wait', why: 'the other members are not all running replicas on hosts that stay' };
  return { kind: 'switchover' };
}

export interface HostDrainDeps {
  repo: DatabaseRepository;
  events: EventService;
  clock: Clock;
  logger: Logger;
  healing: HostHealing;
  switchover: Switchover;
  /** Moves a 1-node database off the host through the object store. */
  move: SingleMove;
  registry?: Registry;
}

/**
 * Draining an agent host before maintenance (`fulcrum host drain ID`, POST
 * /v4/fulcrum/agents/:id/drain; docs/multi-host.md, "Draining a host"). A drain is refused up front
 * when a member there would have nowhere to go. While it lasts nothing new is placed on the host
 * (placement and re-placement skip it), and the lease holder's round moves its members off: each
 * replica to another host (seeded from the primary, as after a host loss), then each primary by a
 * planned switchover (switchover.ts), after which it is a replica and moves the same way; a
 * 1-node database is fenced, its archive shipped, and rebuilt on another host from the object
 * store (single-move.ts).
 */
export class HostDrain {
  private readonly log: Logger;
  /** "agent" of drains already logged as finished (logged once). */
  private readonly finished = new Set<string>();
  /** "db:why" last waited for, so a wait is logged once. */
  private readonly waits = new Map<number, string>();
  /** Databases whose switchover was abandoned: not tried again before this time (ms). */
  private readonly retryAt = new Map<number, number>();

  constructor(private readonly d: HostDrainDeps) {
    this.log = d.logger.child({ component: 'host-drain' });
    if (!d.registry) return;
    const repo = d.repo;
    new Gauge({
      name: 'fulcrum_agent_host_drain_members', help: 'Members still placed on each draining agent host (0: the drain is done)', labelNames: ['agent'], registers: [d.registry],
      async collect() {
        this.reset();
        const dbs = await repo.list();
        const placements = await repo.members();
        for (const a of await repo.agents()) if (a.drainingAt) this.set({ agent: a.id }, membersOn(a.id, dbs, placements));
      },
    });
  }

  /** The drain state of every agent host. */
  async views(): Promise<Map<string, DrainView>> {
    const dbs = await this.d.repo.list();
    const placements = await this.d.repo.members();
    return new Map((await this.d.repo.agents()).map((a) => [a.id, this.view(a, dbs, placements)]));
  }

  /** Puts a host to drain; refused (400, conflict) when a member there would have nowhere to go. */
  async drain(id: string): Promise<DrainView> {
    const a = await this.known(id);
    if (hostState(a) === 'lost') throw FulcrumError.conflict(`Agent ${id} was declared lost; its members are re-placed already.`);
    const dbs = await this.d.repo.list();
    const placements = await this.d.repo.members();
    if (a.drainingAt) return this.view(a, dbs, placements);
    // Checked and set in one transaction: an update starting a rollout checks the drain in its own.
    await this.d.repo.transaction(async () => {
      const rolling = new Set((await this.d.repo.pendingOperations()).filter((op) => op.kind === 'rollout').map((op) => op.databaseId));
      const refusals = drainRefusals(id, await this.d.repo.list(), await this.d.repo.members(), await this.d.repo.agents(), this.d.clock.now(), rolling);
      if (refusals.length > 0) throw FulcrumError.conflict(`Agent ${id} cannot be drained: ${refusals.join('; ')}.`);
      await this.d.repo.setAgentDraining(id, this.d.clock.now());
    });
    this.finished.delete(id);
    this.log.warn({ agent: id, members: membersOn(id, dbs, placements) }, 'agent host put to drain');
    for (const db of dbs.filter((x) => !x.deleting && placements.some((m) => m.databaseId === x.id && m.agentId === id))) {
      const mine = placements.filter((m) => m.databaseId === db.id);
      const which = mine.filter((m) => m.agentId === id).map((m) => `member ${m.member}${m.member === db.primaryMember ? ' (primary)' : ''}`).join(', ');
      const how = spansAgents(mine) ? 'replicas first, then the primary by a planned switchover' : 'made read-only, its binlog shipped to the object store, then rebuilt there from the store';
      await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message: `Drain of agent ${id}: ${which} moves to another host (${how}).`, hosts: [id] });
    }
    return this.view((await this.d.repo.agent(id))!, dbs, placements);
  }

  /** Ends a drain: the host takes new members again; what has moved stays where it is. */
  async undrain(id: string): Promise<DrainView> {
    const a = await this.known(id);
    if (a.drainingAt) {
      await this.d.repo.setAgentDraining(id, null);
      this.log.warn({ agent: id }, 'agent host drain ended');
    }
    return this.view((await this.d.repo.agent(id))!, await this.d.repo.list(), await this.d.repo.members());
  }

  /** The lease holder's round: one step per database with a member on a draining host. True when placements changed. */
  async tick(): Promise<boolean> {
    const agents = await this.d.repo.agents();
    const draining = new Set(agents.filter((a) => a.drainingAt && hostState(a) !== 'lost').map((a) => a.id));
    if (draining.size === 0) return false;
    let changed = false;
    const dbs = (await this.d.repo.list()).filter((x) => !x.deleting);
    for (const agentId of draining) {
      const placements = await this.d.repo.members();
      const left = membersOn(agentId, dbs, placements);
      if (left === 0) {
        if (!this.finished.has(agentId)) this.log.warn({ agent: agentId }, 'agent host drained: no member left on it');
        this.finished.add(agentId);
        continue;
      }
      for (const db of dbs) {
        if (!placements.some((m) => m.databaseId === db.id && m.agentId === agentId) || this.d.switchover.busy(db.id) || this.d.move.busy(db.id)) continue;
        const reports = await this.d.repo.memberReports(db.id);
        const step = drainStep(agentId, db, placements, reports, draining, (k) => placements.some((m) => m.databaseId === db.id && m.member === k && m.seed !== undefined));
        if (step.kind === 'wait') {
          if (this.waits.get(db.id) !== step.why) this.log.info({ agent: agentId, database: db.id, why: step.why }, 'drain waits');
          this.waits.set(db.id, step.why);
          continue;
        }
        this.waits.delete(db.id);
        if (step.kind === 'move') {
          changed = (await this.d.healing.moveOff(db, step.member, agentId)) !== undefined || changed;
          continue;
        }
        if ((this.retryAt.get(db.id) ?? 0) > this.d.clock.now()) continue;
        if (step.kind === 'relocate') {
          this.relocate(db, agentId, agents, dbs, placements);
          continue;
        }
        const target = switchoverTarget(db, placements.filter((m) => m.databaseId === db.id), reports, agents, this.d.clock.now(), draining);
        if (!target) continue;
        // Runs in the background (a second or two): the round goes on with other databases.
        void this.d.switchover.run(db.id, target, `agent ${agentId} is draining`).then((out) => {
          if (out.kind === 'abandoned') this.retryAt.set(db.id, this.d.clock.now() + SWITCHOVER_RETRY_MS);
          else this.retryAt.delete(db.id);
        }, (err) => {
          this.retryAt.set(db.id, this.d.clock.now() + SWITCHOVER_RETRY_MS);
          this.log.error({ err, database: db.id }, 'planned switchover failed');
        });
      }
    }
    return changed;
  }

  /** Starts the move of the 1-node database `db` off `agentId`, in the background (it takes seconds). */
  private relocate(db: DatabaseRecord, agentId: string, agents: readonly AgentRecord[], dbs: readonly DatabaseRecord[], placements: readonly MemberPlacement[]): void {
    const from = agents.find((a) => a.id === agentId);
    const live = new Set(dbs.map((x) => x.id));
    const load = new Map<string, number>();
    for (const m of placements) if (live.has(m.databaseId)) load.set(m.agentId, (load.get(m.agentId) ?? 0) + 1);
    const to = from ? moveTarget(db, from, agents, load, this.d.clock.now()) : undefined;
    if (!to) {
      const why = 'no other connected agent shares the object store';
      if (this.waits.get(db.id) !== why) this.log.warn({ agent: agentId, database: db.id, why }, 'drain waits');
      this.waits.set(db.id, why);
      return;
    }
    void this.d.move.run(db.id, agentId, to, `agent ${agentId} is draining`).then((out) => {
      if (out.kind === 'abandoned') this.retryAt.set(db.id, this.d.clock.now() + SWITCHOVER_RETRY_MS);
      else this.retryAt.delete(db.id);
    }, (err) => {
      this.retryAt.set(db.id, this.d.clock.now() + SWITCHOVER_RETRY_MS);
      this.log.error({ err, database: db.id }, 'move of a 1-node database failed');
    });
  }

  private async known(id: string): Promise<AgentRecord> {
    if (!ID.test(id)) throw FulcrumError.field('id', 'Must be the id of an agent host.');
    const a = await this.d.repo.agent(id);
    if (!a) throw FulcrumError.notFound();
    return a;
  }

  private view(a: AgentRecord, dbs: readonly DatabaseRecord[], placements: readonly MemberPlacement[]): DrainView {
    return { id: a.id, draining: !!a.drainingAt, drainingAt: a.drainingAt ?? null, membersLeft: membersOn(a.id, dbs, placements) };
  }
}
