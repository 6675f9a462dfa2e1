import type { Registry } from 'prom-client';
import { Gauge } from 'prom-client';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadAgentProto, onStreamGone } from '../../lib/grpc.js';
import type { AgentReport__Output } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { AgentDesired } from '../../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentRecord } from '../domain/databases/model.js';
import type { ObservedDatabaseView, OperationResultView } from '../domain/databases/observer.js';
import type { ReportedNode } from '../domain/databases/failover-coordinator.js';
import type { AgentReports, AgentReportView, AgentRound } from '../domain/databases/agent-reports.js';
import { agentContent, type AgentContent, type MemberAddress } from './agent-desired.js';
import { SnapshotCache, type SnapshotSource, type Subscriber, type SubscriberStatusStore, type VersionLedger } from './snapshot-cache.js';
import { refuse, resolveClaim, type PeerAuth } from './peer-auth.js';
import type { PeerStreams } from './peer-streams.js';

export interface AgentServerDeps {
  /** The domain side of the agents: placement, their recorded connection, what a report changes. */
  agents: AgentReports;
  /** Versions of each agent's desired state ('agent_desired_version' in the key-value store). */
  ledger: VersionLedger;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Who a stream's peer is: its certificate (docs/security/grpc.md), or nobody when insecure. */
  peers: PeerAuth;
  /** Where open streams are registered, so that a removed agent's are closed (peer-streams.ts). */
  streams: PeerStreams;
  coalesceMs?: number;
  /** This control-plane replica's id ('' with one control plane; docs/architecture.md, "The streams"). */
  replica?: string;
  /** The data planes' member-facing addresses for a region (the members' PROXY header senders). */
  proxySources?: (region: string) => string[];
}

/**
 * Each agent's desired state. A round first places unplaced databases on the open streams'
 * agents (the domain does). Versions are per agent and raised above what the agent already
 * applied, so an agent that kept a newer version than the store (a restored control plane) still
 * sees an increase.
 */
function desiredSource(agents: AgentReports, ledger: VersionLedger, proxySources: (region: string) => string[]): SnapshotSource<AgentRound, AgentContent> {
  return {
    read: (subscribers) => agents.desiredRound(subscribers),
    select: (round, sub) => {
      const addressOf: MemberAddress = (db, m) => round.addresses.get(`${db}:${m}`) ?? '';
      return agentContent(sub.id, round.databases, round.members, round.pending, proxySources, addressOf, round.slots);
    },
    version: async (_round, sub, hash) => ledger.versionFor(`agent_desired:${sub.id}`, hash, (await agents.agent(sub.id))?.appliedVersion ?? 0),
  };
}

/** Agent status as the push cache sees it, translated to and from the domain's agent record. */
function agentStatus(agents: AgentReports): SubscriberStatusStore {
  const toStatus = (a: AgentRecord) => ({
    id: a.id, region: a.region, connected: a.connected, replica: a.replica, appliedVersion: a.appliedVersion, lastError: null, lastErrorAt: null, lastSeen: a.lastSeen,
  });
  return {
    get: async (id) => {
      const a = await agents.agent(id);
      return a && toStatus(a);
    },
    list: async () => (await agents.agents()).map(toStatus),
    put: (s) => agents.recordConnection({ id: s.id, region: s.region, connected: s.connected, replica: s.replica, lastSeen: s.lastSeen, appliedVersion: s.appliedVersion }),
    release: (replica, id, at) => agents.release(replica, id, at),
  };
}

/** One report in the domain's words. */
function reportView(msg: AgentReport__Output): AgentReportView {
  return {
    runtime: msg.runtime,
    membersAcrossHosts: msg.membersAcrossHosts,
    backupStore: msg.backupStore ?? '',
    engines: (msg.engines ?? []).map((e) => ({ id: e.id, engine: e.engine || 'mysql', version: e.version, image: e.image, binary: e.binary })),
    databases: observations(msg),
    results: results(msg),
    nodes: reportedNodes(msg),
    backupDays: (msg.databases ?? []).map((o) => ({ id: Number(o.id), day: o.lastAutoBackupDay ?? '' })),
  };
}

function observations(msg: AgentReport__Output): ObservedDatabaseView[] {
  return (msg.databases ?? []).map((o) => ({
    id: Number(o.id), status: o.status, members: o.members ?? {}, caCertPem: o.caCertPem, error: o.error,
    usedDiskMb: Number(o.usedDiskMb), convergedGeneration: Number(o.convergedGeneration), patchPending: !!o.patchPending,
    oldestRestoreMs: Number(o.oldestRestoreMs ?? 0),
    backupKey: o.backupKey ?? '',
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
    operationId: r.operationId, databaseId: Number(r.databaseId), ok: r.ok, error: r.error, errorCode: r.errorCode, backupId: Number(r.backupId), position: r.position,
  }));
}

/**
 * AgentService.Stream, the agents' side of the push (docs/architecture.md, "The streams"). Each
 * connected agent gets the complete desired state of the databases placed on it plus the pending
 * operations; it is resent on every change and whole on (re)connect, level-triggered. Reports go
 * to the domain (AgentReports), which applies them and starts the rounds they call for; this
 * adapter only translates between the stream and those calls.
 */
export class AgentPushServer {
  private readonly cache: SnapshotCache<AgentRound, AgentContent>;
  private readonly log: Logger;

  constructor(private readonly d: AgentServerDeps) {
    this.log = d.logger.child({ component: 'agent-push' });
    this.cache = new SnapshotCache({
      source: desiredSource(d.agents, d.ledger, d.proxySources ?? (() => [])), status: agentStatus(d.agents), clock: d.clock, coalesceMs: d.coalesceMs, replica: d.replica,
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
    // The domain applies the report and starts the rounds that follow from what it changed.
    await this.d.agents.apply(sub.id, reportView(msg));
    // Level-triggered: a (re)connected agent gets the full desired state at once.
    if (fresh || msg.hello) await this.cache.push(sub, true);
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
