import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import { isUtcDay } from '../../../lib/utc-day.js';
import type { DatabaseRepository } from './repository.js';
import type { AgentRecord, BackupSlot, DatabaseRecord, MemberPlacement, OperationRecord } from './model.js';
import type { DatabaseObserver, ObservedDatabaseView, OperationResultView } from './observer.js';
import { placeDatabases, type PlacementAgent } from './placement.js';
import type { FailoverCoordinator, ReportedNode } from './failover-coordinator.js';
import { LruMap } from '../../../lib/lru.js';
import { fromPlacedAgent, IgnoredReports, reportScope } from './report-scope.js';

/** Everything one agent report says, in the domain's words (the push adapter translates the proto). */
export interface AgentReportView {
  /** Empty when the report does not say (the known runtime is kept). */
  runtime: string;
  /** Said in every report (a bool has no "absent"): the latest report is the capability. */
  membersAcrossHosts: boolean;
  /**
   * The identity of the agent's backup store (endpoint, bucket, prefix; never credentials), '' for
   * local folders; said in every report. Agents with the same identity share a store.
   */
  backupStore?: string;
  /** Empty when the report does not say (the known engines are kept). */
  engines: AgentRecord['engines'];
  databases: ObservedDatabaseView[];
  results: OperationResultView[];
  /** Each database's nodes as the failover coordinator reads them. */
  nodes: { id: number; nodes: ReportedNode[] }[];
  /** The last auto-backup day the agent took for each database ('' when none). */
  backupDays: { id: number; day: string }[];
}

/** What the agents' desired state is made of in one push round. */
export interface AgentRound {
  databases: DatabaseRecord[];
  members: MemberPlacement[];
  pending: OperationRecord[];
  slots: BackupSlot[];
  /** "databaseId:member" -> the address its own agent reported. */
  addresses: Map<string, string>;
}

/** An agent's connection as the push records it (its runtime and engines are kept as they are). */
export type AgentConnection = Pick<AgentRecord, 'id' | 'region' | 'connected' | 'replica' | 'appliedVersion' | 'lastSeen'>;

export interface AgentReportsDeps {
  repo: DatabaseRepository;
  observer: DatabaseObserver;
  /** Failover of clusters spread over agents; gets every report's member nodes. */
  failover?: FailoverCoordinator;
  clock: Clock;
  logger: Logger;
  /** The agents' desired state changed (a status, a result, a member's address): push to them. */
  onDesiredChanged?: () => void;
  /** What the data planes serve changed (a database's status or members): push to them. */
  onServedChanged?: () => void;
  /** A report changed the stored state: the other replicas' agents and data planes follow it. */
  onStoredChanged?: () => void;
  /** Every report, once applied (the engine catalogue re-reads the engines agents report). */
  onReported?: () => Promise<void> | void;
}

/**
 * The agents' side of Managed Databases (docs/architecture.md, "Who owns what"): placing
 * databases on the connected agents, the agents' recorded connection, and what one report
 * changes (inventory, observed status, auto-backup days, member nodes). The push adapter
 * (push/agent-server.ts) translates the stream into calls here; what changed is said through
 * the hooks, and those start the agent and data-plane rounds.
 */
export class AgentReports {
  /** The last auto-backup day each database's agent reported, so only a new one is written. */
  private readonly backupDays = new LruMap<number, string>(100_000);
  private readonly ignored: IgnoredReports;
  private readonly log: Logger;

  constructor(private readonly d: AgentReportsDeps) {
    this.log = d.logger.child({ component: 'agent-reports' });
    this.ignored = new IgnoredReports(this.log);
  }

  agent(id: string): Promise<AgentRecord | undefined> {
    return this.d.repo.agent(id);
  }

  /** Every agent ever seen with its status (connected, region, runtime, engines, applied version). */
  agents(): Promise<AgentRecord[]> {
    return this.d.repo.agents();
  }

  /** Records an agent's connection; the runtime, engines and capability stay what it reported. */
  async recordConnection(c: AgentConnection): Promise<void> {
    const prev = await this.d.repo.agent(c.id);
    await this.d.repo.upsertAgent({
      id: c.id, region: c.region, runtime: prev?.runtime ?? '', membersAcrossHosts: prev?.membersAcrossHosts ?? false, backupStore: prev?.backupStore ?? '', connected: c.connected, replica: c.replica, lastSeen: c.lastSeen,
      appliedVersion: c.appliedVersion, engines: prev?.engines ?? [],
    });
  }

  /** Marks the agents `replica` holds (or only `id`) disconnected (at `at`, when given). */
  release(replica: string, id?: string, at?: number): Promise<void> {
    return this.d.repo.releaseAgents(replica, id, at);
  }

  /**
   * One round's desired state: unplaced databases are first placed on the connected agents
   * (placement reads the load and writes the choice in one transaction), then the state is read.
   */
  async desiredRound(connected: readonly { id: string; region: string }[]): Promise<AgentRound> {
    const repo = this.d.repo;
    const agents: PlacementAgent[] = [];
    for (const s of connected) {
      const a = await repo.agent(s.id);
      // Nothing new goes to a draining host (docs/multi-host.md, "Draining a host").
      if (a?.drainingAt) continue;
      agents.push({ id: s.id, region: s.region, membersAcrossHosts: a?.membersAcrossHosts ?? false, backupStore: a?.backupStore ?? '' });
    }
    for (const p of await repo.transaction(() => placeDatabases(repo, agents))) this.log.info(p, 'database placed');
    // Members' addresses as their agents reported them, through any replica (the store's reports);
    // only a placed member's row from its own agent counts (docs/databases.md, "Whose report counts").
    const members = await repo.members();
    const addresses = new Map((await repo.memberReports()).filter(fromPlacedAgent(members)).map((r) => [`${r.databaseId}:${r.member}`, r.address]));
    return { databases: await repo.list(), members, pending: await repo.pendingOperations(), slots: await repo.backupSlots(), addresses };
  }

  /**
   * Applies one report of agent `agentId`, in order: inventory, observed status and results,
   * auto-backup days, member nodes; then says what changed through the hooks.
   */
  async apply(agentId: string, r: AgentReportView): Promise<void> {
    await this.recordInventory(agentId, r);
    const outcome = await this.d.observer.apply(agentId, r.databases, r.results);
    await this.recordBackupDays(agentId, r.backupDays);
    // A member's address first reported (or moved) is what its peers on other agents replicate from.
    const moved = (await this.d.failover?.record(agentId, r.nodes)) ?? false;
    if (moved || outcome.desired) this.d.onDesiredChanged?.();
    if (outcome.served) this.d.onServedChanged?.();
    // What the data planes serve is read from the store: a change of it alone (members written
    // while `active` waits for the routes) must reach the other replicas' data planes as well, or
    // a database waiting on a data plane connected to another replica waits the whole bound.
    if (moved || outcome.desired || outcome.served) this.d.onStoredChanged?.();
    await this.d.onReported?.();
  }

  /**
   * A data plane answered a snapshot: databases waiting for their routes may read `active` now
   * (observer.ts `recheck`); what that changed is said through the hooks, as for a report.
   */
  async dataplaneAnswered(): Promise<void> {
    const outcome = await this.d.observer.recheck();
    if (outcome.desired) this.d.onDesiredChanged?.();
    if (outcome.served) this.d.onServedChanged?.();
    if (outcome.desired || outcome.served) this.d.onStoredChanged?.();
  }

  /** The runtime and engines an agent reports; a report without them keeps what was known. */
  private async recordInventory(id: string, r: AgentReportView): Promise<void> {
    const prev = await this.d.repo.agent(id);
    if (!prev) return;
    const runtime = r.runtime || prev.runtime || '';
    const membersAcrossHosts = r.membersAcrossHosts;
    const engines = r.engines.length > 0 ? r.engines : prev.engines;
    const backupStore = r.backupStore ?? '';
    if (runtime === prev.runtime && membersAcrossHosts === prev.membersAcrossHosts && backupStore === (prev.backupStore ?? '')
      && JSON.stringify(engines) === JSON.stringify(prev.engines)) return;
    await this.d.repo.upsertAgent({ ...prev, runtime, membersAcrossHosts, engines, backupStore });
  }

  /**
   * Auto-backup days the agents took mark the claimed days taken (docs/databases.md, "Auto
   * backups"); written by the replica the agent reports to, and only when the day moved. Only an
   * agent holding the database speaks for its day (docs/databases.md, "Whose report counts").
   */
  private async recordBackupDays(agentId: string, days: AgentReportView['backupDays']): Promise<void> {
    for (const { id, day } of days) {
      if (!isUtcDay(day) || this.backupDays.get(id) === day) continue;
      const scope = await reportScope(this.d.repo, agentId, id);
      if (scope !== 'held') {
        this.ignored.note(agentId, id, 'last_auto_backup_day', scope);
        continue;
      }
      await this.d.repo.markBackupSlotsTaken(id, day, this.d.clock.now());
      this.backupDays.set(id, day);
    }
  }
}
