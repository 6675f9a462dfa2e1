import { wireTime } from '../../../lib/clock.js';
import type { BackupRecord, DatabaseRecord } from '../../domain/databases/model.js';
import type { EngineEntry } from '../../domain/databases/catalogue.js';
import { findType } from '../../domain/databases/types.js';

/**
 * Wire shapes of Managed Databases, key for key as the real service answered in 2024:
 * the full MySQL instance (with `members`), the reduced `/databases/instances` item (with
 * `instance_uri`, without ssl_connection/replication_type), engines and backups.
 */
function hosts(d: DatabaseRecord): { primary: string | null; secondary: string | null; standby: string | null } {
  // Hosts are assigned (shown) once provisioning completes; they are the endpoint IPv4 addresses
  // themselves so that any client can connect without DNS. `standby` is today's name of
  // `secondary`; both are sent so old and new clients find it (docs/databases.md).
  if (!d.provisioned) return { primary: null, secondary: null, standby: null };
  return { primary: d.hostPrimary, secondary: d.hostSecondary, standby: d.hostSecondary };
}

/** Both sizes are integers in every schema: the plan's disk, and what the agent measured (0 before). */
function disks(d: DatabaseRecord): { total: number; used: number } {
  const type = findType(d.type);
  return { total: type ? Math.round(type.disk / 1024) : 0, used: d.usedDiskMb === null ? 0 : Math.ceil(d.usedDiskMb / 1024) };
}

/** One entry of `updates.pending`: work waiting for the maintenance window. */
export interface PendingUpdate {
  deadline: string | null;
  description: string;
  planned_for: string | null;
}

/** The full object; `pending` is what DatabaseService.pendingUpdates says waits for the window. */
export function databaseToWire(d: DatabaseRecord, pending: PendingUpdate[] = []): Record<string, unknown> {
  const disk = disks(d);
  return {
    allow_list: d.allowList,
    cluster_size: d.clusterSize,
    created: wireTime(d.created),
    encrypted: d.encrypted,
    engine: 'mysql',
    // `mysql` is always there, empty when nothing is set: the Terraform provider's
    // linode_database_mysql_v2 reads engine_config.mysql.* through linodego's pointer without a
    // nil check, and crashed on `{}` right after its create.
    engine_config: { ...d.engineConfig, mysql: d.engineConfig.mysql ?? {} },
    fork: d.fork ? { source: d.fork.source, restore_time: wireTime(d.fork.restoreTimeMs) } : null,
    hosts: hosts(d),
    id: d.id,
    label: d.label,
    members: d.members,
    oldest_restore_time: d.oldestRestoreMs ? wireTime(d.oldestRestoreMs) : null,
    platform: 'rdbms-default',
    port: d.port,
    region: d.region,
    replication_type: d.replicationType,
    ssl_connection: d.sslConnection,
    status: d.status,
    total_disk_size_gb: disk.total,
    type: d.type,
    updated: wireTime(d.updated),
    updates: { ...d.updates, pending },
    used_disk_size_gb: disk.used,
    version: d.version,
  };
}

/**
 * `/databases/instances` item: the URI always starts with /v4, whichever prefix was called.
 * This reduced form omits port, replication_type, ssl_connection and the disk-size fields, as
 * the specification states; that wins over the 2024 recording, which still carried port and
 * disks (docs/databases.md).
 */
export function databaseSummaryToWire(d: DatabaseRecord, pending: PendingUpdate[] = []): Record<string, unknown> {
  const {
    engine_config: _e,
    fork: _f,
    oldest_restore_time: _o,
    port: _p,
    replication_type: _r,
    ssl_connection: _s,
    total_disk_size_gb: _t,
    used_disk_size_gb: _u,
    ...rest
  } = databaseToWire(d, pending);
  return { ...rest, instance_uri: `/v4/databases/mysql/instances/${d.id}` };
}

export function engineToWire(e: EngineEntry): Record<string, unknown> {
  return { engine: e.engine, id: e.id, version: e.version };
}

export function backupToWire(b: BackupRecord): Record<string, unknown> {
  return { created: wireTime(b.created), id: b.id, label: b.label, type: b.type };
}
