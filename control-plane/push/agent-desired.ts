import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { Operation } from '../../proto/gen/fulcrum/v1/Operation.js';
import type { DatabaseRecord, OperationRecord } from '../domain/databases/model.js';
import { findType } from '../domain/databases/types.js';
import { serverOptions } from '../domain/databases/engine-config.js';

/** The desired state of one database as the agent sees it. */
function toDesired(d: DatabaseRecord, proxySources: string[]): DesiredDatabase {
  const t = findType(d.type);
  const options = serverOptions(d.engineConfig);
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
  };
}

function toOperation(op: OperationRecord): Operation {
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
function orderedOperations(pending: OperationRecord[]): OperationRecord[] {
  return pending.filter((op) => op.kind !== 'snapshot' ||
    !pending.some((o) => o.databaseId === op.databaseId && o.kind === 'deleteBackup' && o.created <= op.created));
}

/** What one agent is sent: its databases and their pending operations. */
export interface AgentContent {
  databases: DesiredDatabase[];
  operations: Operation[];
  /** True only when the store has no live database on this agent (the agent's mass-delete guard). */
  deleteAllIntended: boolean;
}

/** The agent's share of the stored state: the live databases placed on it and their operations. */
export function agentContent(agentId: string, all: DatabaseRecord[], pending: OperationRecord[], proxySources: (region: string) => string[] = () => []): AgentContent {
  const dbs = all.filter((x) => x.agentId === agentId && !x.deleting);
  const ids = new Set(dbs.map((x) => x.id));
  return {
    databases: dbs.map((d) => toDesired(d, proxySources(d.region))),
    operations: orderedOperations(pending.filter((op) => ids.has(op.databaseId))).map(toOperation),
    deleteAllIntended: dbs.length === 0,
  };
}
