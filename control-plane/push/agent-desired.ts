import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { Operation } from '../../proto/gen/fulcrum/v1/Operation.js';
import type { DesiredMember } from '../../proto/gen/fulcrum/v1/DesiredMember.js';
import type { BackupSlot, DatabaseRecord, MemberPlacement, OperationRecord } from '../domain/databases/model.js';
import { spansAgents } from '../domain/databases/placement.js';
import { findType } from '../domain/databases/types.js';
import { serverOptions } from '../domain/databases/engine-config.js';

/**
 * The members of a database as `agentId` sees them. A database without placements (placed by an
 * older control plane) runs every member on its one agent. A member with the seeding mark carries
 * it (`seeding`): its agent keeps its semi-sync acknowledgements off until the mark is cleared
 * (docs/multi-host.md, "Failover candidates"); sent only when set, so other members read as before.
 */
function membersFor(d: DatabaseRecord, placements: MemberPlacement[], agentId: string, addressOf: MemberAddress): DesiredMember[] {
  const list: MemberPlacement[] = placements.length > 0 ? placements : Array.from({ length: d.clusterSize }, (_, k) => ({ databaseId: d.id, member: k + 1, agentId: d.agentId ?? agentId }));
  return list.map((m) => ({
    index: m.member, agentId: m.agentId, local: m.agentId === agentId, address: addressOf(d.id, m.member), serverId: m.serverId ?? m.member,
    ...(m.seed !== undefined ? { seeding: true } : {}),
  }));
}

/** address:port of a member as its agent last reported it ('' when not yet). */
export type MemberAddress = (databaseId: number, member: number) => string;

/** The desired state of one database as the agent sees it. */
function toDesired(d: DatabaseRecord, members: DesiredMember[], proxySources: string[], autoBackupDay: string, forkSourceKey: string): DesiredDatabase {
  const t = findType(d.type);
  const options = serverOptions(d.engineConfig);
  const spread = spansAgents(members);
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
    restartOptions: options.restart, dynamicOptions: options.dynamic, proxySources,
    // Only a cluster spread over agents has a primary named by the control plane (0 = the agent decides).
    members, term: d.term, primaryMember: spread ? d.primaryMember : 0,
    primaryPosition: spread ? d.primaryPosition ?? '' : '',
    // The word that a fence was abandoned: a spread cluster's switchover, or a 1-node database's move.
    fenceLiftedTerm: spread || d.clusterSize === 1 ? d.fenceLiftedTerm ?? 0 : 0,
    binlogRetentionSeconds: d.engineConfig.binlog_retention_period ?? 0,
    forkSource: d.fork?.source ?? 0, forkRestoreMs: d.fork?.restoreTimeMs ?? 0,
    forkThroughSecond: d.fork?.throughSecond === true,
    ...(forkSourceKey ? { forkSourceKey } : {}),
    // Only agents running a member of the database get here (agentContent), so only they get its key.
    ...(d.backupKey ? { backupKey: d.backupKey } : {}),
    // A recovery on the agent it was placed on: rebuilt from its own objects in the shared store
    // with its own key, by the fork-from-store path (docs/multi-host.md, "A 1-node database on a lost host").
    ...(recovering(d, members) ? { forkSource: d.id, forkRestoreMs: 0, forkThroughSecond: false, forkSourceKey: d.backupKey!, recoverFromStore: true } : {}),
    // The control plane decides when auto backups are due (docs/databases.md, "Auto backups").
    backupsScheduled: true, autoBackupDay,
    // The shared CA key and replication password go only to agents running part of a spread cluster.
    ...(spread && d.clusterSecrets ? { clusterCaPem: d.clusterSecrets.caCertPem, clusterCaKeyPem: d.clusterSecrets.caKeyPem, replicationPassword: d.clusterSecrets.replPassword } : {}),
    // A 1-node database's CA, when the control plane made it, goes to its one agent: the same CA
    // then serves it on whichever host it is rebuilt on (docs/multi-host.md, "A 1-node database on a lost host").
    ...(!spread && d.clusterSize === 1 && d.clusterSecrets ? { clusterCaPem: d.clusterSecrets.caCertPem, clusterCaKeyPem: d.clusterSecrets.caKeyPem } : {}),
  };
}

/**
 * Whether the agent `members` are seen by is rebuilding `d` from the store: it was placed there
 * for a recovery that has not ended (the observer ends it once that agent reports it active).
 */
function recovering(d: DatabaseRecord, members: DesiredMember[]): boolean {
  return !!d.recovery?.placedMs && !!d.backupKey && d.agentId !== null && members.some((m) => m.local && m.agentId === d.agentId);
}

function toOperation(op: OperationRecord): Operation | undefined {
  const base = { operationId: op.id, databaseId: op.databaseId };
  switch (op.kind) {
    case 'snapshot': return { ...base, snapshot: { label: String(op.payload.label), target: String(op.payload.target ?? 'primary') } };
    case 'restore': return { ...base, restore: { backupId: Number(op.payload.backup_id) } };
    case 'deleteBackup': return { ...base, deleteBackup: { backupId: Number(op.payload.backup_id) } };
    case 'patch': return { ...base, patch: {} };
    case 'resetCredentials': return { ...base, resetCredentials: { newPassword: String(op.payload.new_password) } };
    case 'fence': return { ...base, fence: { term: Number(op.payload.term), member: Number(op.payload.member) } };
    case 'catchUp': return { ...base, catchUp: { member: Number(op.payload.member), position: String(op.payload.position), timeoutMs: Number(op.payload.timeout_ms) } };
    case 'restartMember': return { ...base, restartMember: { member: Number(op.payload.member), ...(op.payload.patch === true ? { patch: true } : {}) } };
    // The control plane's own record of a rollout (rollout.ts); no agent runs it.
    case 'rollout': return undefined;
  }
}

/**
 * Operations the agent may start now. The API counts a backup being deleted as gone, so a
 * snapshot requested after a delete waits until the agent has removed the old files (the agent
 * enforces the 3-snapshot limit on what it stores).
 */
function orderedOperations(pending: OperationRecord[]): OperationRecord[] {
  return pending.filter((op) => op.kind !== 'snapshot' ||
    !pending.some((o) => o.databaseId === op.databaseId && o.kind === 'deleteBackup' && o.created <= op.created));
}

/**
 * The source's backup key for a fork `agentId` builds away from the source's agent (from the
 * shared object store), until the fork is provisioned; '' otherwise. The key goes to no other
 * agent, and a fork on the source's own agent needs none (that agent holds it).
 */
function forkSourceKey(d: DatabaseRecord, all: DatabaseRecord[], agentId: string): string {
  if (!d.fork || d.provisioned || d.agentId !== agentId) return '';
  const source = all.find((x) => x.id === d.fork!.source);
  if (!source || source.agentId === agentId || !source.backupKey) return '';
  return source.backupKey;
}

/** What one agent is sent: its databases and their pending operations. */
export interface AgentContent {
  databases: DesiredDatabase[];
  operations: Operation[];
  /** True only when the store has no live database on this agent (the agent's mass-delete guard). */
  deleteAllIntended: boolean;
  /**
   * Deleted databases still placed on this agent: gone, not moved, so the agent removes their
   * objects in the store too, also one fenced for a move that the delete abandoned.
   */
  deletedDatabases: number[];
}

/**
 * The agent's share of the stored state: the live databases with a member on it (or placed on it
 * whole) and their operations.
 */
export function agentContent(
  agentId: string, all: DatabaseRecord[], placements: MemberPlacement[], pending: OperationRecord[],
  proxySources: (region: string) => string[] = () => [], addressOf: MemberAddress = () => '', slots: BackupSlot[] = [],
): AgentContent {
  const dayOf = new Map(slots.map((s) => [s.databaseId, s.slot]));
  const byDb = new Map<number, MemberPlacement[]>();
  for (const m of placements) byDb.set(m.databaseId, [...(byDb.get(m.databaseId) ?? []), m]);
  const dbs = all.filter((x) => !x.deleting && (x.agentId === agentId || (byDb.get(x.id) ?? []).some((m) => m.agentId === agentId)));
  // One-off operations go to the reporting agent only (the one whose reports carry the results),
  // except those addressed to one agent (a planned switchover's steps, `payload.agent`), which go
  // to that agent while it holds a member of the database.
  const ids = new Set(dbs.filter((x) => x.agentId === agentId).map((x) => x.id));
  const held = new Set(dbs.map((x) => x.id));
  const mine = (op: OperationRecord) => (typeof op.payload.agent === 'string' ? op.payload.agent === agentId && held.has(op.databaseId) : ids.has(op.databaseId));
  return {
    databases: dbs.map((d) => toDesired(d, membersFor(d, byDb.get(d.id) ?? [], agentId, addressOf), proxySources(d.region), dayOf.get(d.id) ?? '', forkSourceKey(d, all, agentId))),
    operations: orderedOperations(pending.filter(mine)).map(toOperation).filter((o): o is Operation => o !== undefined),
    deleteAllIntended: dbs.length === 0,
    deletedDatabases: all.filter((x) => x.deleting && (x.agentId === agentId || (byDb.get(x.id) ?? []).some((m) => m.agentId === agentId))).map((x) => x.id),
  };
}
