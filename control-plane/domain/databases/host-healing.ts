import { Counter, Gauge, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import { FulcrumError } from '../../../lib/errors.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import { gtidProgress } from './failover-decision.js';
import { currentReports } from './failover-coordinator.js';
import { spansAgents } from './placement.js';
import type { AgentRecord, DatabaseRecord } from './model.js';
import { caughtUp, clusterIncomplete, homeless, hostState, recoveryAgent, replacementAgent, unrecoverable, type HostState } from './host-rules.js';

export { clusterIncomplete, hostState, recoveryAgent, replacementAgent, unrecoverable, type HostState };

/** An agent host as operators see it (GET /v4/fulcrum/agents, POST .../lost). */
export interface HostView {
  id: string;
  region: string;
  state: HostState;
  lastSeen: number | null;
  lostAt: number | null;
}

const ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export interface HostHealingDeps {
  repo: DatabaseRepository;
  events: EventService;
  clock: Clock;
  logger: Logger;
  registry?: Registry;
  /** Fences a host: revokes its certificates and closes its streams on every replica (FleetService.revoke). */
  revoke: (id: string) => Promise<unknown>;
  /** Whether the fleet still marks the host removed (a new join token clears the mark). */
  removed: (id: string) => Promise<boolean>;
  /**
   * Declares a host lost by itself after this long without a stream (--host-lost-after); off
   * (undefined) by default: docs/multi-host.md says why.
   */
  lostAfterMs?: number;
}

/**
 * Healing after a host is lost (docs/multi-host.md, "A lost host"). An agent host is `up` (its
 * stream is open), `unreachable` (no stream) or `lost`: declared so by an operator, or by the
 * control plane after `--host-lost-after`. Declaring a host lost fences it (its certificates are
 * revoked, its streams closed) and takes its members away from it, so a host that comes back
 * (only with a new join token) is sent none of them and its agent removes them. On the lease
 * holder's tick each member of a spread cluster that has no host is placed on another healthy
 * agent of the region, where its agent builds it and seeds it from the current primary over TLS;
 * the primary itself moves only once the failover coordinator has named another one.
 */
export class HostHealing {
  private readonly log: Logger;
  private readonly startedAt: number;
  /** "db:member" already told to have no host to go to (said once per wait). */
  private readonly waiting = new Set<string>();
  private readonly lostTotal?: Counter;
  private readonly replaced?: Counter;
  private readonly recoveries?: Counter;

  constructor(private readonly d: HostHealingDeps) {
    this.log = d.logger.child({ component: 'host-healing' });
    this.startedAt = d.clock.now();
    if (!d.registry) return;
    this.lostTotal = new Counter({ name: 'fulcrum_agent_hosts_lost_total', help: 'Agent hosts declared lost', labelNames: ['by'], registers: [d.registry] });
    this.replaced = new Counter({ name: 'fulcrum_database_members_replaced_total', help: 'Members of spread clusters placed on a new host after theirs was lost', registers: [d.registry] });
    this.recoveries = new Counter({ name: 'fulcrum_database_recoveries_total', help: '1-node databases of lost hosts placed on another host to be rebuilt from the object store', registers: [d.registry] });
    const repo = d.repo;
    new Gauge({
      name: 'fulcrum_agent_hosts', help: 'Agent hosts by state (up, unreachable, lost)', labelNames: ['state'], registers: [d.registry],
      async collect() {
        const n: Record<HostState, number> = { up: 0, unreachable: 0, lost: 0 };
        for (const a of await repo.agents()) n[hostState(a)]++;
        for (const [state, v] of Object.entries(n)) this.set({ state }, v);
      },
    });
    new Gauge({
      name: 'fulcrum_database_members_homeless', help: 'Members of spread clusters placed on no host or on a lost one', registers: [d.registry],
      async collect() {
        const lost = new Set((await repo.agents()).filter((a) => hostState(a) === 'lost').map((a) => a.id));
        const live = new Set((await repo.list()).filter((x) => !x.deleting).map((x) => x.id));
        this.set((await repo.members()).filter((m) => live.has(m.databaseId) && homeless(m, lost)).length);
      },
    });
    new Gauge({
      name: 'fulcrum_database_members_seeding', help: 'Re-placed members not yet caught up with their primary', registers: [d.registry],
      async collect() {
        const live = new Set((await repo.list()).filter((x) => !x.deleting).map((x) => x.id));
        this.set((await repo.members()).filter((m) => live.has(m.databaseId) && m.seed !== undefined).length);
      },
    });
  }

  /** Every agent host with its state. */
  async hosts(): Promise<HostView[]> {
    return (await this.d.repo.agents()).map((a) => this.view(a));
  }

  /**
   * Declares an agent host lost (`fulcrum host lost ID`, POST /v4/fulcrum/agents/:id/lost). Its
   * certificates are revoked first (it can never again speak for a member), then in one
   * transaction it is marked lost and every member it ran that is not a primary is placed nowhere,
   * to be re-placed; a primary waits for the failover coordinator to name another. Declaring a
   * lost host lost again changes nothing.
   */
  async declareLost(id: string, by: 'operator' | 'timeout', cause: string): Promise<HostView> {
    if (!ID.test(id)) throw FulcrumError.field('id', 'Must be the id of an agent host.');
    const known = await this.d.repo.agent(id);
    if (!known) throw FulcrumError.notFound();
    if (hostState(known) === 'lost') return this.view(known);
    await this.d.revoke(id);
    const now = this.d.clock.now();
    const touched = await this.d.repo.transaction(async () => {
      await this.d.repo.setAgentLost(id, now);
      const out: { db: DatabaseRecord; members: number[]; spread: boolean; recovery: string | null }[] = [];
      const placements = await this.d.repo.members();
      for (const db of await this.d.repo.list()) {
        if (db.deleting) continue;
        const mine = placements.filter((m) => m.databaseId === db.id);
        const here = mine.filter((m) => m.agentId === id).map((m) => m.member);
        if (here.length === 0 && db.agentId !== id) continue;
        const spread = spansAgents(mine);
        if (spread) for (const k of here) if (k !== db.primaryMember) await this.d.repo.placeMember(db.id, k, '');
        // Its status comes from its primary's agent, which may be the lost one and say nothing
        // more: it is not whole from now until the new member has caught up (observer.ts).
        if (spread && db.status === 'active') await this.d.repo.update(db.id, { status: 'degraded', updated: Math.floor(now / 1000) * 1000 });
        const why = spread ? null : unrecoverable(db, known);
        if (!spread && why === null) await this.d.repo.update(db.id, { recovery: { from: id, lostMs: now } });
        out.push({ db, members: here.length > 0 ? here : [1], spread, recovery: why });
      }
      return out;
    });
    this.lostTotal?.inc({ by });
    this.log.warn({ agent: id, by, cause, databases: touched.map((t) => t.db.id) }, 'agent host declared lost');
    for (const t of touched) {
      const which = t.members.map((k) => `member ${k}`).join(', ');
      const message = t.spread
        ? `The host of ${which} (agent ${id}) was declared lost (${cause}); it is fenced, and the member is re-placed on another host.`
        : t.recovery === null
          ? `The host of this database (agent ${id}) was declared lost (${cause}); it is rebuilt on another host of the region from the object store (its newest backup plus every archived binlog).`
          : `The host of this database (agent ${id}) was declared lost (${cause}); it is not rebuilt elsewhere: ${t.recovery}.`;
      await this.d.events.record('database_degraded', databaseRef(t.db), { status: 'notification', message, hosts: [id] });
    }
    return this.view((await this.d.repo.agent(id))!);
  }

  /**
   * The lease holder's round: hosts silent past --host-lost-after are declared lost, a lost host
   * that joined again (a new join token cleared its removal) is up again with nothing on it, and
   * homeless members are placed. True when placements or seeding marks changed (push to the agents).
   */
  async tick(): Promise<boolean> {
    const now = this.d.clock.now();
    let changed = false;
    for (const a of await this.d.repo.agents()) {
      const state = hostState(a);
      if (state === 'lost' && a.connected && !(await this.d.removed(a.id))) {
        await this.d.repo.setAgentLost(a.id, null);
        this.log.info({ agent: a.id }, 'a lost agent host joined again; it runs none of its old members');
        // A database that waited there for a host to be rebuilt on is its own again: it is not
        // moved away from it later.
        for (const db of await this.d.repo.list()) {
          if (db.recovery?.from === a.id && db.agentId === a.id && db.recovery.placedMs === undefined) await this.d.repo.update(db.id, { recovery: null });
        }
      } else if (state === 'unreachable' && this.d.lostAfterMs !== undefined && now - this.startedAt >= this.d.lostAfterMs
        && a.lastSeen !== null && now - a.lastSeen >= this.d.lostAfterMs) {
        await this.declareLost(a.id, 'timeout', `unreachable for ${Math.round((now - a.lastSeen) / 1000)} s, past --host-lost-after`);
        changed = true;
      }
    }
    changed = (await this.replace(now)) || changed;
    changed = (await this.recover(now)) || changed;
    // A cleared mark changes the member's desired state: its agent turns acknowledgements on then.
    changed = (await this.watchSeeding(now)) || changed;
    return changed;
  }

  /**
   * Places every database under recovery whose host was lost on a healthy agent of its region
   * that shares the lost host's object store (docs/multi-host.md, "A 1-node database on a lost
   * host"); it waits, with one event saying why, while there is none. Its new agent is sent the
   * database as a recovery (agent-desired.ts) and rebuilds it from the store; the observer ends
   * the recovery when that agent reports it active.
   */
  private async recover(now: number): Promise<boolean> {
    const agents = await this.d.repo.agents();
    const live = (await this.d.repo.list()).filter((x) => !x.deleting);
    const pending = live.filter((x) => x.recovery && x.agentId === x.recovery.from);
    if (pending.length === 0) return false;
    const placements = await this.d.repo.members();
    const liveIds = new Set(live.map((x) => x.id));
    const load = new Map<string, number>();
    for (const id of new Set(placements.filter((m) => liveIds.has(m.databaseId)).map((m) => `${m.agentId}\n${m.databaseId}`))) {
      const agent = id.split('\n')[0]!;
      load.set(agent, (load.get(agent) ?? 0) + 1);
    }
    let changed = false;
    for (const db of pending) {
      const from = db.recovery!.from;
      const store = agents.find((a) => a.id === from)?.backupStore ?? '';
      const agent = recoveryAgent(db, store, agents, load, now);
      const key = `${db.id}:recovery`;
      if (!agent) {
        if (!this.waiting.has(key)) {
          this.waiting.add(key);
          const message = `This database has no host to be rebuilt on: no other connected agent of region ${db.region} shares the object store of the lost host (agent ${from}). It is rebuilt when one joins.`;
          await this.d.events.record('database_degraded', databaseRef(db), { status: 'notification', message, hosts: [from] });
          this.log.warn({ database: db.id, region: db.region, from }, 'no host to recover a database on');
        }
        continue;
      }
      // Only a database still on its lost host in the store moves: a racing replica's round must not move it twice.
      const moved = await this.d.repo.transaction(async () => {
        const cur = await this.d.repo.get(db.id);
        if (!cur || cur.deleting || !cur.recovery || cur.agentId !== from) return false;
        await this.d.repo.setMembers(db.id, Array.from({ length: cur.clusterSize }, () => agent));
        await this.d.repo.update(db.id, {
          agentId: agent, primaryMember: 1, primaryPosition: '', status: 'degraded', members: {}, generation: cur.generation + 1,
          recovery: { ...cur.recovery, placedMs: now }, updated: now,
        });
        return true;
      });
      if (!moved) continue;
      changed = true;
      this.waiting.delete(key);
      this.recoveries?.inc();
      load.set(agent, (load.get(agent) ?? 0) + 1);
      const message = `Placed on agent ${agent} (its host, agent ${from}, was lost); it is rebuilt there from the object store: its newest backup plus every archived binlog, up to the last archived event. The same id, credentials and hosts.`;
      await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [agent, from] });
      this.log.warn({ database: db.id, agent, from }, 'database placed for recovery from the object store');
    }
    return changed;
  }

  /** Places every homeless member of a spread cluster whose primary serves (see class comment). */
  private async replace(now: number): Promise<boolean> {
    const agents = await this.d.repo.agents();
    const lost = new Set(agents.filter((a) => hostState(a) === 'lost').map((a) => a.id));
    const live = (await this.d.repo.list()).filter((x) => !x.deleting);
    let placements = await this.d.repo.members();
    const liveIds = new Set(live.map((x) => x.id));
    const load = new Map<string, number>();
    for (const id of new Set(placements.filter((m) => liveIds.has(m.databaseId)).map((m) => `${m.agentId}\n${m.databaseId}`))) {
      const agent = id.split('\n')[0]!;
      load.set(agent, (load.get(agent) ?? 0) + 1);
    }
    let changed = false;
    for (const db of live) {
      const mine = placements.filter((m) => m.databaseId === db.id);
      if (!spansAgents(mine) || db.runState !== 'running' || !db.provisioned) continue;
      const reports = currentReports(mine, await this.d.repo.memberReports(db.id));
      const primary = reports.get(db.primaryMember);
      const primaryAgent = agents.find((a) => a.id === mine.find((m) => m.member === db.primaryMember)?.agentId);
      for (const m of mine) {
        if (!homeless(m, lost) || m.member === db.primaryMember) continue;
        const key = `${db.id}:${m.member}`;
        // The new member is seeded from the primary: wait until one serves.
        if (!primary || primary.state !== 'running' || primary.role !== 'primary' || !primaryAgent || hostState(primaryAgent) !== 'up') continue;
        const agent = replacementAgent(db, placements, agents, load, now);
        if (!agent) {
          if (m.agentId !== '') await this.d.repo.placeMember(db.id, m.member, '');
          if (!this.waiting.has(key)) {
            this.waiting.add(key);
            const message = `Member ${m.member} has no host to go to: no other connected agent of region ${db.region} that can run part of a cluster is free of this database's members. It is re-placed when one joins.`;
            await this.d.events.record('database_degraded', databaseRef(db), { status: 'notification', message });
            this.log.warn({ database: db.id, member: m.member, region: db.region }, 'no host for a member of a lost host');
          }
          continue;
        }
        // Only members still homeless in the store are moved: a racing replica's round must not move one twice.
        const moved = await this.d.repo.transaction(async () => {
          const cur = (await this.d.repo.members(db.id)).find((x) => x.member === m.member);
          if (!cur || !homeless(cur, lost)) return false;
          await this.d.repo.placeMember(db.id, m.member, agent, { since: now, gtid: gtidProgress(primary.gtid) });
          return true;
        });
        if (!moved) continue;
        changed = true;
        this.waiting.delete(key);
        this.replaced?.inc();
        load.set(agent, (load.get(agent) ?? 0) + 1);
        placements = await this.d.repo.members();
        const message = `Member ${m.member} placed on agent ${agent} (its host${m.agentId ? ` ${m.agentId}` : ''} was lost); it is built there and seeded from the primary, member ${db.primaryMember}.`;
        await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [agent, m.agentId] });
        this.log.warn({ database: db.id, member: m.member, agent, from: m.agentId }, 'member re-placed');
      }
    }
    return changed;
  }

  /**
   * Moves member `member` of `db` off the draining host `from` (host-drain.ts): placed on another
   * healthy agent at once, built there and seeded from the primary like a member of a lost host,
   * and the draining host's agent removes its copy. Only while the primary serves from another
   * host and the member is still on `from`. Returns the agent it went to, or undefined.
   */
  async moveOff(db: DatabaseRecord, member: number, from: string): Promise<string | undefined> {
    const now = this.d.clock.now();
    const agents = await this.d.repo.agents();
    const placements = await this.d.repo.members();
    const mine = placements.filter((m) => m.databaseId === db.id);
    const primary = currentReports(mine, await this.d.repo.memberReports(db.id)).get(db.primaryMember);
    const primaryAgent = mine.find((m) => m.member === db.primaryMember)?.agentId;
    if (member === db.primaryMember || !primary || primary.state !== 'running' || primary.role !== 'primary' || primaryAgent === from) return undefined;
    const load = new Map<string, number>();
    for (const m of placements) load.set(m.agentId, (load.get(m.agentId) ?? 0) + 1);
    const agent = replacementAgent(db, placements, agents, load, now);
    if (!agent) return undefined;
    const moved = await this.d.repo.transaction(async () => {
      const cur = (await this.d.repo.members(db.id)).find((x) => x.member === member);
      if (cur?.agentId !== from) return false;
      await this.d.repo.placeMember(db.id, member, agent, { since: now, gtid: gtidProgress(primary.gtid) });
      return true;
    });
    if (!moved) return undefined;
    const message = `Member ${member} moved off agent ${from} (draining) to agent ${agent}; it is built there and seeded from the primary, member ${db.primaryMember}.`;
    await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [from, agent] });
    this.log.warn({ database: db.id, member, agent, from }, 'member moved off a draining host');
    return agent;
  }

  /**
   * A re-placed member that reports itself a replica at least as far as the primary was (caughtUp)
   * is healed: its mark is cleared and the "caught up" event recorded in one transaction, so the
   * database reads `active` (observer.ts, clusterIncomplete) only once that event exists. True
   * when a mark was cleared: the agents are sent the member unmarked, and only then does its
   * agent let it acknowledge semi-sync writes (it is a failover candidate from this moment on).
   */
  private async watchSeeding(now: number): Promise<boolean> {
    let cleared = false;
    const seeding = (await this.d.repo.members()).filter((m) => m.seed !== undefined);
    for (const m of seeding) {
      const seed = m.seed!;
      const db = await this.d.repo.get(m.databaseId);
      if (!db || db.deleting) continue;
      const placements = await this.d.repo.members(db.id);
      // Named primary meanwhile (a failover chose it): it is seeded from no one any more, and as a
      // primary it never reports itself a replica, so the mark ends here or the database would
      // read degraded for good.
      const named = m.member === db.primaryMember;
      if (!named && !caughtUp(seed, currentReports(placements, await this.d.repo.memberReports(db.id)).get(m.member))) continue;
      const hosts = new Set(placements.map((x) => x.agentId)).size;
      const message = named
        ? `Member ${m.member} on agent ${m.agentId} was named primary before it had caught up; it is seeded no longer.`
        : `Member ${m.member} on agent ${m.agentId} caught up with the primary in ${Math.round((now - seed.since) / 1000)} s: ${placements.length} members on ${hosts} hosts.`;
      const ended = await this.d.repo.transaction(async () => {
        if (!(await this.d.repo.endSeed(db.id, m.member, m.agentId))) return false;
        await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message, hosts: [m.agentId] });
        return true;
      });
      if (ended) this.log.info({ database: db.id, member: m.member, agent: m.agentId, ms: now - seed.since }, 're-placed member caught up');
      cleared ||= ended;
    }
    return cleared;
  }

  private view(a: AgentRecord): HostView {
    return { id: a.id, region: a.region, state: hostState(a), lastSeen: a.lastSeen, lostAt: a.lostAt ?? null };
  }
}
