import type { Registry } from 'prom-client';
import { Gauge } from 'prom-client';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadAgentProto, onStreamGone } from '../../lib/grpc.js';
import { isUtcDay } from '../../lib/utc-day.js';
import type { AgentReport__Output } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { AgentDesired } from '../../proto/gen/fulcrum/v1/AgentDesired.js';
import type { DatabaseRepository } from '../store/database-repository.js';
import type { KeyValueRepository } from '../store/ports.js';
import type { AgentRecord, BackupSlot, DatabaseRecord, MemberPlacement, OperationRecord } from '../domain/databases/model.js';
import type { DatabaseObserver, ObservedDatabaseView, OperationResultView } from '../domain/databases/observer.js';
import { placeDatabases } from '../domain/databases/placement.js';
import type { FailoverCoordinator, ReportedNode } from '../domain/databases/failover-coordinator.js';
import { fromPlacedAgent, IgnoredReports, reportScope } from '../domain/databases/report-scope.js';
import { agentContent, type AgentContent, type MemberAddress } from './agent-desired.js';
import { SnapshotCache, VersionLedger, type SnapshotSource, type Subscriber, type SubscriberStatusStore } from './snapshot-cache.js';
import { refuse, resolveClaim, type PeerAuth } from './peer-auth.js';
import type { PeerStreams } from './peer-streams.js';
import { LruMap } from '../../lib/lru.js';

export interface AgentServerDeps {
  repo: DatabaseRepository;
  kv: KeyValueRepository;
  observer: DatabaseObserver;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Who a stream's peer is: its certificate (docs/security/grpc.md), or nobody when insecure. */
  peers: PeerAuth;
  /** Where open streams are registered, so that a removed agent's are closed (peer-streams.ts). */
  streams: PeerStreams;
  /** Failover of clusters spread over agents; gets every report's member nodes. */
  failover?: FailoverCoordinator;
  coalesceMs?: number;
  /** This control-plane replica's id ('' with one control plane; docs/architecture.md, "The streams"). */
  replica?: string;
  /** The data planes' member-facing addresses for a region (the members' PROXY header senders). */
  proxySources?: (region: string) => string[];
  /** Called after every report is applied (the data planes' endpoints follow what agents see). */
  onObserved?: () => Promise<void> | void;
  /** Hears of a report that changed the stored state (a status, a result, a member's address). */
  onReportChanged?: () => void;
}

type Round = { databases: DatabaseRecord[]; members: MemberPlacement[]; pending: OperationRecord[]; slots: BackupSlot[]; addresses: Map<string, string> };

/**
 * Each agent's desired state. A round first places unplaced databases on the open streams'
 * agents. Versions are per agent and raised above what the agent already applied, so an agent
 * that kept a newer version than the store (a restored control plane) still sees an increase.
 */
function desiredSource(repo: DatabaseRepository, kv: KeyValueRepository, log: Logger, proxySources: (region: string) => string[]): SnapshotSource<Round, AgentContent> {
  const ledger = new VersionLedger(kv, 'agent_desired_version');
  return {
    async read(subscribers) {
      const connected: { id: string; region: string; membersAcrossHosts: boolean }[] = [];
      for (const s of subscribers) connected.push({ ...s, membersAcrossHosts: (await repo.agent(s.id))?.membersAcrossHosts ?? false });
      // Placement reads the load and writes the choice in one transaction.
      for (const p of await repo.transaction(() => placeDatabases(repo, connected))) log.info(p, 'database placed');
      // Members' addresses as their agents reported them, through any replica (the store's reports);
      // only a placed member's row from its own agent counts (docs/databases.md, "Whose report counts").
      const members = await repo.members();
      const addresses = new Map((await repo.memberReports()).filter(fromPlacedAgent(members)).map((r) => [`${r.databaseId}:${r.member}`, r.address]));
      return { databases: await repo.list(), members, pending: await repo.pendingOperations(), slots: await repo.backupSlots(), addresses };
    },
    select: (round, sub) => {
      const addressOf: MemberAddress = (db, m) => round.addresses.get(`${db}:${m}`) ?? '';
      return agentContent(sub.id, round.databases, round.members, round.pending, proxySources, addressOf, round.slots);
    },
    version: async (_round, sub, hash) => ledger.versionFor(`agent_desired:${sub.id}`, hash, (await repo.agent(sub.id))?.appliedVersion ?? 0),
  };
}

/** Agent status as the push cache sees it; the agent's runtime and engines are kept as they are. */
function agentStatus(repo: DatabaseRepository): SubscriberStatusStore {
  const toStatus = (a: AgentRecord) => ({
    id: a.id, region: a.region, connected: a.connected, replica: a.replica, appliedVersion: a.appliedVersion, lastError: null, lastErrorAt: null, lastSeen: a.lastSeen,
  });
  return {
    get: async (id) => {
      const a = await repo.agent(id);
      return a && toStatus(a);
    },
    list: async () => (await repo.agents()).map(toStatus),
    put: async (s) => {
      const prev = await repo.agent(s.id);
      await repo.upsertAgent({
        id: s.id, region: s.region, runtime: prev?.runtime ?? '', membersAcrossHosts: prev?.membersAcrossHosts ?? false, connected: s.connected, replica: s.replica, lastSeen: s.lastSeen,
        appliedVersion: s.appliedVersion, engines: prev?.engines ?? [],
      });
    },
    release: (replica, id, at) => repo.releaseAgents(replica, id, at),
  };
}

function observations(msg: AgentReport__Output): ObservedDatabaseView[] {
  return (msg.databases ?? []).map((o) => ({
    id: Number(o.id), status: o.status, members: o.members ?? {}, caCertPem: o.caCertPem, error: o.error,
    usedDiskMb: Number(o.usedDiskMb), convergedGeneration: Number(o.convergedGeneration), patchPending: !!o.patchPending,
    oldestRestoreMs: Number(o.oldestRestoreMs ?? 0),
    backups: (o.backups ?? []).map((b) => ({ id: Number(b.id), label: b.label, type: b.type, createdMs: Number(b.createdMs), sizeBytes: Number(b.sizeBytes), status: b.status, target: b.target })),
    events: (o.events ?? []).map((e) => ({ id: e.id, action: e.action, message: e.message, atMs: Number(e.atMs), status: e.status })),
    nodes: (o.nodes ?? []).map((n) => ({ role: n.role, state: n.state })),
  }));
}

/** Each database's nodes as the failover coordinator reads them (member index, state, role, GTID). */
function reportedNodes(msg: AgentReport__Output): { id: number; nodes: ReportedNode[] }[] {
  return (msg.databases ?? []).map((o) => ({
    id: Number(o.id),
    nodes: (o.nodes ?? []).map((n) => ({ member: n.member, state: n.state, role: n.role, gtid: n.gtidCurrentPos, address: n.address ? `${n.address}:${n.port}` : '' })),
  }));
}

function results(msg: AgentReport__Output): OperationResultView[] {
  return (msg.operationResults ?? []).map((r) => ({
    operationId: r.operationId, databaseId: Number(r.databaseId), ok: r.ok, error: r.error, errorCode: r.errorCode, backupId: Number(r.backupId),
  }));
}

/**
 * AgentService.Stream, the agents' side of the push (docs/architecture.md, "The streams"). Each
 * connected agent gets the complete desired state of the databases placed on it plus the pending
 * operations; it is resent on every change and whole on (re)connect, level-triggered. Reports go
 * to the DatabaseObserver, which owns the API status.
 */
export class AgentPushServer {
  private readonly cache: SnapshotCache<Round, AgentContent>;
  private readonly log: Logger;
  /** The last auto-backup day each database's agent reported, so only a new one is written. */
  private readonly backupDays = new LruMap<number, string>(100_000);
  private readonly ignored: IgnoredReports;

  constructor(private readonly d: AgentServerDeps) {
    this.log = d.logger.child({ component: 'agent-push' });
    this.ignored = new IgnoredReports(this.log);
    this.cache = new SnapshotCache({
      source: desiredSource(d.repo, d.kv, this.log, d.proxySources ?? (() => [])), status: agentStatus(d.repo), clock: d.clock, coalesceMs: d.coalesceMs, replica: d.replica,
      onError: (err) => this.log.error({ err }, 'agent push round failed'),
    });
    const cache = this.cache;
    new Gauge({
      name: 'fulcrum_agents_connected', help: 'Agents with an open stream', registers: [d.registry],
      collect() {
        this.set(cache.size);
      },
    });
  }

  register(server: grpc.Server): void {
    const proto = loadAgentProto();
    server.addService(proto.fulcrum.v1.AgentService.service, { Stream: (call: any) => this.onStream(call) });
  }

  notifyChanged(): void {
    this.cache.notifyChanged();
  }

  /** Records every open stream as connected again (docs/architecture.md, "The streams"). */
  reassert(): Promise<void> {
    return this.cache.reassert();
  }

  close(): Promise<void> {
    this.cache.close();
    return this.cache.idle();
  }

  /** Every agent ever seen with its status (connected, region, runtime, engines, applied version). */
  agents(): Promise<AgentRecord[]> {
    return this.d.repo.agents();
  }

  /** The runtime and engines an agent reports; a report without them keeps what was known. */
  private async recordInventory(id: string, msg: AgentReport__Output): Promise<void> {
    const prev = await this.d.repo.agent(id);
    if (!prev) return;
    const runtime = msg.runtime || prev.runtime || '';
    // Said in every report (a bool has no "absent"): the latest report is the capability.
    const membersAcrossHosts = msg.membersAcrossHosts;
    const engines = (msg.engines ?? []).length > 0
      ? msg.engines.map((e) => ({ id: e.id, engine: e.engine || 'mysql', version: e.version, image: e.image, binary: e.binary }))
      : prev.engines;
    if (runtime === prev.runtime && membersAcrossHosts === prev.membersAcrossHosts && JSON.stringify(engines) === JSON.stringify(prev.engines)) return;
    await this.d.repo.upsertAgent({ ...prev, runtime, membersAcrossHosts, engines });
  }

  /**
   * Auto-backup days the agents took mark the claimed days taken (docs/databases.md, "Auto
   * backups"); written by the replica the agent reports to, and only when the day moved. Only an
   * agent holding the database speaks for its day (docs/databases.md, "Whose report counts").
   */
  private async recordBackupDays(agentId: string, msg: AgentReport__Output): Promise<void> {
    for (const o of msg.databases ?? []) {
      const id = Number(o.id);
      const day = o.lastAutoBackupDay ?? '';
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

  private onStream(call: grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>): void {
    const state: StreamState = { refused: false };
    // Reports are applied one after another, in order, once the peer is known.
    let chain: Promise<void> = this.d.peers.identify(call, 'agent').then((p) => {
      state.peer = p;
    }, (err) => {
      state.refused = true;
      this.log.warn({ reason: (err as Error).message }, 'agent stream refused');
      refuse(call, err);
    });
    call.on('data', (msg: AgentReport__Output) => {
      chain = chain.then(() => this.onReport(call, msg, state)).catch((err) => {
        this.log.error({ err }, 'agent report could not be applied');
      });
    });
    onStreamGone(call, () => {
      chain = chain.then(async () => {
        const sub = state.sub;
        state.unregister?.();
        if (sub && (await this.cache.disconnect(sub))) this.log.info({ agent: sub.id }, 'agent disconnected');
      }).catch((err) => this.log.error({ err }, 'agent stream end could not be recorded'));
    });
  }

  private async onReport(call: grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>, msg: AgentReport__Output, state: StreamState): Promise<void> {
    if (state.refused) return;
    const fresh = !state.sub;
    if (!state.sub) {
      let claim: { id: string; region: string };
      try {
        claim = resolveClaim(state.peer, { id: msg.agentId, region: msg.region }, { id: 'agent', region: '' });
      } catch (err) {
        state.refused = true;
        this.log.warn({ reason: (err as Error).message, claimed: msg.agentId }, 'agent stream refused');
        refuse(call, err);
        return;
      }
      const id = claim.id;
      state.unregister = this.d.streams.add({ role: 'agent', id, serial: state.peer?.serial ?? '', end: (reason) => {
        state.refused = true;
        refuse(call, reason);
      } });
      state.sub = await this.cache.connect(id, claim.region, Number(msg.appliedVersion), {
        send: ({ version, content }) => {
          call.write({ version, ...content });
          this.log.debug({ agent: id, version, databases: content.databases.length, operations: content.operations.length }, 'desired state sent');
        },
        end: () => call.end(),
      });
      this.log.info({ agent: id, region: state.sub.region, applied: msg.appliedVersion }, 'agent connected');
    } else {
      await this.cache.seen(state.sub, Number(msg.appliedVersion));
    }
    const sub = state.sub;
    await this.recordInventory(sub.id, msg);
    const changed = await this.d.observer.apply(sub.id, observations(msg), results(msg));
    await this.recordBackupDays(sub.id, msg);
    // A member's address first reported (or moved) is what its peers on other agents replicate from.
    const moved = await this.d.failover?.record(sub.id, reportedNodes(msg));
    if (moved) this.notifyChanged();
    // Level-triggered: a (re)connected agent gets the full desired state at once.
    if (fresh || msg.hello) await this.cache.push(sub, true);
    if (changed) this.notifyChanged();
    if (moved || changed) this.d.onReportChanged?.();
    await this.d.onObserved?.();
  }
}

/** What one agent stream knows between its messages. */
interface StreamState {
  refused: boolean;
  peer?: Awaited<ReturnType<PeerAuth['identify']>>;
  sub?: Subscriber<AgentContent>;
  /** Takes the stream out of PeerStreams when it ends. */
  unregister?: () => void;
}
