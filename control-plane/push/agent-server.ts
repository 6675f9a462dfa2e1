import { createHash } from 'node:crypto';
import type { Registry } from 'prom-client';
import { Gauge } from 'prom-client';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadAgentProto, onStreamGone } from '../../lib/grpc.js';
import type { AgentReport__Output } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { AgentDesired } from '../../proto/gen/fulcrum/v1/AgentDesired.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { Operation } from '../../proto/gen/fulcrum/v1/Operation.js';
import type { DatabaseRepository } from '../store/database-repository.js';
import type { KeyValueRepository } from '../store/ports.js';
import type { AgentRecord, DatabaseRecord, OperationRecord } from '../domain/databases/model.js';
import type { DatabaseObserver } from '../domain/databases/observer.js';
import { findType } from '../domain/databases/types.js';

interface Subscriber {
  id: string;
  region: string;
  call: grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>;
  sentHash?: string;
}

export interface AgentServerDeps {
  repo: DatabaseRepository;
  kv: KeyValueRepository;
  observer: DatabaseObserver;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  coalesceMs?: number;
}

/** The desired state of one database as the agent sees it. */
export function toDesired(d: DatabaseRecord): DesiredDatabase {
  const t = findType(d.type);
  return {
    id: d.id, label: d.label, engineId: d.engineId, version: d.version, image: d.image, binary: d.binary,
    type: { id: d.type, memoryMb: t?.memory ?? 1024, vcpus: t?.vcpus ?? 1, diskMb: t?.disk ?? 25600 },
    clusterSize: d.clusterSize, replicationType: d.replicationType, sslConnection: d.sslConnection, encrypted: d.encrypted,
    allowList: d.allowList,
    updates: {
      frequency: d.updates.frequency, duration: d.updates.duration, hourOfDay: d.updates.hour_of_day,
      dayOfWeek: d.updates.day_of_week ?? 0, weekOfMonth: d.updates.week_of_month ?? 0,
    },
    rootPassword: d.nextPassword ?? d.rootPassword, state: d.runState,
    hostPrimary: d.hostPrimary, hostSecondary: d.hostSecondary ?? '', port: d.port, generation: d.generation,
  };
}

export function toOperation(op: OperationRecord): Operation {
  const base = { operationId: op.id, databaseId: op.databaseId };
  switch (op.kind) {
    case 'snapshot': return { ...base, snapshot: { label: String(op.payload.label), target: String(op.payload.target ?? 'primary') } };
    case 'restore': return { ...base, restore: { backupId: Number(op.payload.backup_id) } };
    case 'deleteBackup': return { ...base, deleteBackup: { backupId: Number(op.payload.backup_id) } };
    case 'patch': return { ...base, patch: {} };
    case 'resetCredentials': return { ...base, resetCredentials: { newPassword: String(op.payload.new_password) } };
  }
}

/**
 * Operations the agent may start now. The API counts a backup being deleted as gone, so a
 * snapshot requested after a delete waits until the agent has removed the old files (the agent
 * enforces the 3-snapshot limit on what it stores).
 */
export function orderedOperations(pending: OperationRecord[]): OperationRecord[] {
  return pending.filter((op) => op.kind !== 'snapshot' ||
    !pending.some((o) => o.databaseId === op.databaseId && o.kind === 'deleteBackup' && o.created <= op.created));
}

/** Whether an agent of `agentRegion` may run a database of `dbRegion` (empty = any region). */
export function servesRegion(agentRegion: string, dbRegion: string): boolean {
  return agentRegion === '' || agentRegion === '*' || agentRegion === dbRegion;
}

/**
 * The control plane's side of AgentService.Stream (DESIGN §6). Each connected agent gets the
 * complete desired state of the databases placed on it plus the pending operations, with a
 * version that only increases (persisted, and raised above what the agent already applied);
 * it is resent on every change and on reconnect. Reports go to the DatabaseObserver.
 * Placement: a database goes to the connected agent of its region running the fewest
 * databases, and stays there.
 */
export class AgentPushServer {
  private readonly subs = new Map<string, Subscriber>();
  private timer: NodeJS.Timeout | undefined;
  private readonly log: Logger;
  private readonly gConnected: Gauge;

  constructor(private readonly d: AgentServerDeps) {
    this.log = d.logger.child({ component: 'agent-push' });
    this.gConnected = new Gauge({ name: 'fulcrum_agents_connected', help: 'Agents with an open stream', registers: [d.registry] });
    // After a restart no stream is open: no agent is connected until it says hello again.
    for (const a of d.repo.agents()) if (a.connected) d.repo.upsertAgent({ ...a, connected: false });
  }

  register(server: grpc.Server): void {
    const proto = loadAgentProto();
    server.addService(proto.fulcrum.v1.AgentService.service, { Stream: (call: any) => this.onStream(call) });
  }

  notifyChanged(): void {
    if (this.timer) return;
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.place();
      for (const s of this.subs.values()) this.push(s);
    }, this.d.coalesceMs ?? 10);
  }

  close(): void {
    if (this.timer) clearTimeout(this.timer);
    for (const s of this.subs.values()) s.call.end();
    this.subs.clear();
  }

  connectedAgents(): AgentRecord[] {
    return this.d.repo.agents();
  }

  /** Assigns every unplaced database to a connected agent of its region. */
  private place(): void {
    const live = this.d.repo.list().filter((x) => !x.deleting);
    for (const db of live) {
      if (db.agentId !== null) continue;
      const candidates = [...this.subs.values()].filter((s) => servesRegion(s.region, db.region));
      if (candidates.length === 0) continue;
      const load = (id: string) => live.filter((x) => x.agentId === id).length;
      candidates.sort((a, b) => load(a.id) - load(b.id) || a.id.localeCompare(b.id));
      this.d.repo.update(db.id, { agentId: candidates[0]!.id });
      db.agentId = candidates[0]!.id;
      this.log.info({ database: db.id, agent: db.agentId }, 'database placed');
    }
  }

  private push(s: Subscriber, force = false): void {
    const dbs = this.d.repo.list().filter((x) => x.agentId === s.id && !x.deleting);
    const ids = new Set(dbs.map((x) => x.id));
    const databases = dbs.map(toDesired);
    const operations = orderedOperations(this.d.repo.pendingOperations().filter((op) => ids.has(op.databaseId))).map(toOperation);
    const hash = createHash('sha256').update(JSON.stringify({ databases, operations })).digest('hex');
    if (!force && hash === s.sentHash) return;
    const version = this.versionFor(s.id, hash);
    s.sentHash = hash;
    s.call.write({ version, databases, operations });
    this.log.debug({ agent: s.id, version, databases: databases.length, operations: operations.length }, 'desired state sent');
  }

  /** Same content keeps its version; new content gets a version above everything seen. */
  private versionFor(agentId: string, hash: string): number {
    const key = `agent_desired:${agentId}`;
    const [lastVersion, lastHash] = (this.d.kv.get(key) ?? '0:').split(':');
    if (lastHash === hash) return Number(lastVersion);
    const applied = this.d.repo.agent(agentId)?.appliedVersion ?? 0;
    const version = Math.max(Number(this.d.kv.get('agent_desired_version') ?? '0'), applied) + 1;
    this.d.kv.set('agent_desired_version', String(version));
    this.d.kv.set(key, `${version}:${hash}`);
    return version;
  }

  private record(msg: AgentReport__Output, id: string, region: string, connected: boolean): void {
    const prev = this.d.repo.agent(id);
    this.d.repo.upsertAgent({
      id, region, runtime: msg.runtime || prev?.runtime || '', connected, lastSeen: this.d.clock.now(),
      appliedVersion: Number(msg.appliedVersion ?? prev?.appliedVersion ?? 0),
      engines: (msg.engines ?? []).length > 0
        ? msg.engines.map((e) => ({ id: e.id, engine: e.engine || 'mysql', version: e.version, image: e.image, binary: e.binary }))
        : prev?.engines ?? [],
    });
  }

  private onStream(call: grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>): void {
    let sub: Subscriber | undefined;
    call.on('data', (msg: AgentReport__Output) => {
      try {
        const fresh = !sub;
        if (!sub) {
          const id = msg.agentId || 'agent';
          const old = this.subs.get(id);
          if (old) old.call.end();
          sub = { id, region: msg.region ?? '', call };
          this.subs.set(id, sub);
          this.gConnected.set(this.subs.size);
          this.log.info({ agent: id, region: sub.region, applied: msg.appliedVersion }, 'agent connected');
        }
        this.record(msg, sub.id, sub.region, true);
        const changed = this.d.observer.apply(sub.id, (msg.databases ?? []).map((o) => ({
          id: Number(o.id), status: o.status, members: o.members ?? {}, caCertPem: o.caCertPem, error: o.error,
          usedDiskMb: Number(o.usedDiskMb), convergedGeneration: Number(o.convergedGeneration),
          backups: (o.backups ?? []).map((b) => ({ id: Number(b.id), label: b.label, type: b.type, createdMs: Number(b.createdMs), sizeBytes: Number(b.sizeBytes), status: b.status, target: b.target })),
          events: (o.events ?? []).map((e) => ({ id: e.id, action: e.action, message: e.message, atMs: Number(e.atMs), status: e.status })),
          nodes: (o.nodes ?? []).map((n) => ({ role: n.role, state: n.state })),
        })), (msg.operationResults ?? []).map((r) => ({
          operationId: r.operationId, databaseId: Number(r.databaseId), ok: r.ok, error: r.error, backupId: Number(r.backupId),
        })));
        if (fresh || msg.hello) {
          // Level-triggered: a (re)connected agent gets the full desired state at once.
          this.place();
          this.push(sub, true);
        }
        if (changed) this.notifyChanged();
      } catch (err) {
        this.log.error({ err }, 'agent report could not be applied');
      }
    });
    const gone = () => {
      if (!sub || this.subs.get(sub.id) !== sub) return;
      this.subs.delete(sub.id);
      this.gConnected.set(this.subs.size);
      const prev = this.d.repo.agent(sub.id);
      if (prev) this.d.repo.upsertAgent({ ...prev, connected: false, lastSeen: this.d.clock.now() });
      this.log.info({ agent: sub.id }, 'agent disconnected');
    };
    onStreamGone(call, gone);
  }
}
