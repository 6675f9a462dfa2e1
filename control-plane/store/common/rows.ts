/**
 * Rows as both adapters read them, and the mappers between rows and the domain's records. Both
 * dialects hold the same tables with the same columns (migrations.ts): integers come back as
 * numbers (the PostgreSQL executor parses BIGINT so), booleans as 0/1, lists and objects as JSON
 * text, secret columns sealed (docs/security/secrets.md). A new column is added here once, for
 * both stores.
 */

import type { SecretBox } from '../../../lib/secret-box.js';
import type { Grants, TokenRecord, User } from '../../domain/auth/model.js';
import type { EventRecord } from '../../domain/events/model.js';
import type { DataplaneStatus, NbConfig, NbNode, NodeBalancer } from '../../domain/nodebalancers/model.js';
import type { AgentRecord, BackupRecord, BackupSlot, DatabaseRecord, MemberPlacement, MemberReport, OperationRecord } from '../../domain/databases/model.js';
import type { FleetCertState, JoinTokenRecord } from '../../domain/fleet/repository.js';

/** A 0/1 integer column. */
type Flag = number;

const emptyGrants = (): Grants => ({ global: {}, nodebalancer: {}, database: {} });

function parseGrants(s: string): Grants {
  try {
    return { ...emptyGrants(), ...(JSON.parse(s) as Partial<Grants>) };
  } catch {
    return emptyGrants();
  }
}

export interface UserRow {
  id: number; username: string; email: string; restricted: Flag; grants: string; timezone: string | null; preferences: string;
}
export const userRow = (r: UserRow | undefined): User | undefined =>
  r && { id: r.id, username: r.username, email: r.email, restricted: r.restricted === 1, timezone: r.timezone ?? 'UTC', grants: parseGrants(r.grants) };

export interface TokenRow {
  id: number; user_id: number; label: string; scopes: string; token_hash: string; token_prefix: string; created: number; expiry: number | null;
}
export const tokenRow = (r: TokenRow | undefined): TokenRecord | undefined =>
  r && { id: r.id, userId: r.user_id, label: r.label, scopes: r.scopes, tokenPrefix: r.token_prefix, created: r.created, expiry: r.expiry };

export interface EventRow {
  id: number; created: number; action: string; username: string | null;
  entity_id: number | null; entity_type: string | null; entity_label: string | null; entity_url: string | null; secondary_entity: string | null;
  status: EventRecord['status']; percent_complete: number | null; duration: number | null; message: string | null; seen: Flag; read: Flag;
  hosts?: string | null;
}
export const eventRow = (r: EventRow | undefined): EventRecord | undefined =>
  r && {
    id: r.id,
    created: r.created,
    action: r.action,
    username: r.username,
    entity: r.entity_type ? { id: r.entity_id!, type: r.entity_type, label: r.entity_label!, url: r.entity_url! } : null,
    secondaryEntity: r.secondary_entity ? JSON.parse(r.secondary_entity) as EventRecord['secondaryEntity'] : null,
    status: r.status,
    percentComplete: r.percent_complete,
    duration: r.duration,
    message: r.message,
    ...(r.hosts ? { hosts: JSON.parse(r.hosts) as string[] } : {}),
    seen: r.seen === 1,
    read: r.read === 1,
  };

export interface DataplaneRow {
  id: string; region: string; connected: Flag; replica: string; version_applied: number;
  last_error: string | null; last_error_at: number | null; last_seen: number | null;
}
export const dataplaneRow = (r: DataplaneRow | undefined): DataplaneStatus | undefined =>
  r && {
    id: r.id, region: r.region, connected: r.connected === 1, replica: r.replica, versionApplied: r.version_applied,
    lastError: r.last_error, lastErrorAt: r.last_error_at, lastSeen: r.last_seen,
  };

/** Traffic counters are summed into buckets of this many ms. */
export const BUCKET_MS = 5 * 60 * 1000;

export interface NodeBalancerRow {
  id: number; label: string; region: string; ipv4: string; ipv6: string | null; client_conn_throttle: number;
  client_udp_sess_throttle: number; type: NodeBalancer['type']; tags: string; created: number; updated: number;
}
export function nbRow(r: NodeBalancerRow | undefined): NodeBalancer | undefined {
  if (!r) return undefined;
  return {
    id: r.id, label: r.label, region: r.region, ipv4: r.ipv4, ipv6: r.ipv6 ?? null, clientConnThrottle: r.client_conn_throttle,
    clientUdpSessThrottle: r.client_udp_sess_throttle, type: r.type, tags: JSON.parse(r.tags) as string[], created: r.created, updated: r.updated,
  };
}

// ssl_key is sealed at rest (docs/security/secrets.md).
const SSL_KEY = 'nb_configs.ssl_key';

/** The columns of nb_configs a config writes, in this order (id and nodebalancer_id aside). */
export const CONFIG_COLUMNS = ['port', 'protocol', 'algorithm', 'stickiness', 'check', 'check_interval', 'check_timeout', 'check_attempts', 'check_path',
  'check_body', 'check_passive', 'proxy_protocol', 'cipher_suite', 'ssl_cert', 'ssl_key', 'ssl_commonname', 'ssl_fingerprint', 'udp_check_port',
  'udp_session_timeout'] as const;

/** What a config writes: one value for each of CONFIG_COLUMNS. */
export type ConfigValues = { [K in (typeof CONFIG_COLUMNS)[number]]: string | number | null };

export interface ConfigRow extends ConfigValues {
  id: number; nodebalancer_id: number; port: number; protocol: NbConfig['protocol']; algorithm: NbConfig['algorithm'];
  stickiness: NbConfig['stickiness']; check: NbConfig['check']; check_interval: number; check_timeout: number; check_attempts: number;
  check_path: string; check_body: string; check_passive: Flag; proxy_protocol: NbConfig['proxyProtocol']; cipher_suite: NbConfig['cipherSuite'];
  ssl_cert: string | null; ssl_key: string | null; ssl_commonname: string; ssl_fingerprint: string; udp_check_port: number; udp_session_timeout: number;
}
export function configRow(r: ConfigRow | undefined, box: SecretBox): NbConfig | undefined {
  if (!r) return undefined;
  return {
    id: r.id, nodebalancerId: r.nodebalancer_id, port: r.port, protocol: r.protocol, algorithm: r.algorithm,
    stickiness: r.stickiness, check: r.check, checkInterval: r.check_interval, checkTimeout: r.check_timeout,
    checkAttempts: r.check_attempts, checkPath: r.check_path, checkBody: r.check_body, checkPassive: r.check_passive === 1,
    proxyProtocol: r.proxy_protocol, cipherSuite: r.cipher_suite, sslCert: r.ssl_cert, sslKey: box.openNullable(r.ssl_key, SSL_KEY),
    sslCommonname: r.ssl_commonname, sslFingerprint: r.ssl_fingerprint, udpCheckPort: r.udp_check_port, udpSessionTimeout: r.udp_session_timeout,
  };
}
export function configValues(c: Omit<NbConfig, 'id' | 'nodebalancerId'>, box: SecretBox): ConfigValues {
  return {
    port: c.port, protocol: c.protocol, algorithm: c.algorithm, stickiness: c.stickiness, check: c.check,
    check_interval: c.checkInterval, check_timeout: c.checkTimeout, check_attempts: c.checkAttempts,
    check_path: c.checkPath, check_body: c.checkBody, check_passive: c.checkPassive ? 1 : 0,
    proxy_protocol: c.proxyProtocol, cipher_suite: c.cipherSuite, ssl_cert: c.sslCert, ssl_key: box.sealNullable(c.sslKey, SSL_KEY),
    ssl_commonname: c.sslCommonname, ssl_fingerprint: c.sslFingerprint, udp_check_port: c.udpCheckPort, udp_session_timeout: c.udpSessionTimeout,
  };
}

export interface NodeRow {
  id: number; config_id: number; nodebalancer_id: number; label: string; address: string; weight: number; mode: NbNode['mode']; status: NbNode['status'];
}
export function nodeRow(r: NodeRow | undefined): NbNode | undefined {
  if (!r) return undefined;
  return {
    id: r.id, configId: r.config_id, nodebalancerId: r.nodebalancer_id, label: r.label, address: r.address,
    weight: r.weight, mode: r.mode, status: r.status,
  };
}

/** A traffic bucket as `traffic` reads it (sums named in the record's words). */
export interface TrafficRow { bucket: number; bytesIn: number; bytesOut: number; connections: number }

// `secret` columns are sealed at rest (docs/security/secrets.md).
export const databaseColumns: [keyof DatabaseRecord, string, 'json' | 'bool' | 'plain' | 'secret' | 'secret-json'][] = [
  ['label', 'label', 'plain'], ['region', 'region', 'plain'], ['type', 'type', 'plain'],
  ['engineId', 'engine_id', 'plain'], ['version', 'version', 'plain'], ['image', 'image', 'plain'],
  ['binary', 'binary', 'plain'], ['clusterSize', 'cluster_size', 'plain'], ['replicationType', 'replication_type', 'plain'],
  ['encrypted', 'encrypted', 'bool'], ['sslConnection', 'ssl_connection', 'bool'], ['allowList', 'allow_list', 'json'],
  ['updates', 'updates', 'json'], ['status', 'status', 'plain'], ['hostPrimary', 'host_primary', 'plain'],
  ['hostSecondary', 'host_secondary', 'plain'], ['port', 'port', 'plain'], ['provisioned', 'provisioned', 'bool'],
  ['members', 'members', 'json'], ['caCert', 'ca_cert', 'plain'], ['usedDiskMb', 'used_disk_mb', 'plain'],
  ['patchPending', 'patch_pending', 'bool'], ['engineConfig', 'engine_config', 'json'], ['secondEventId', 'second_event_id', 'plain'],
  ['rootPassword', 'root_password', 'secret'], ['nextPassword', 'next_password', 'secret'], ['generation', 'generation', 'plain'],
  ['convergedGeneration', 'converged_generation', 'plain'], ['runState', 'run_state', 'plain'], ['agentId', 'agent_id', 'plain'], ['term', 'term', 'plain'], ['primaryMember', 'primary_member', 'plain'],
  ['primaryPosition', 'primary_position', 'plain'], ['fenceLiftedTerm', 'fence_lifted_term', 'plain'],
  ['pendingEventId', 'pending_event_id', 'plain'], ['deleting', 'deleting', 'bool'], ['deleteEventId', 'delete_event_id', 'plain'],
  ['lastError', 'last_error', 'plain'], ['created', 'created', 'plain'], ['updated', 'updated', 'plain'],
  ['fork', 'fork', 'json'], ['oldestRestoreMs', 'oldest_restore_ms', 'plain'],
  ['clusterSecrets', 'cluster_secrets', 'secret-json'], ['backupKey', 'backup_key', 'secret'],
  ['recovery', 'recovery', 'json'],
];

/**
 * A row of `databases`: its id and, by column name, the values databaseColumns lists (read and
 * written through that list, so one new field is one line there).
 */
export type DatabaseRow = { id: number } & Record<string, unknown>;

export function databaseValues(d: Partial<DatabaseRecord>, box: SecretBox): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  for (const [key, col, kind] of databaseColumns) {
    if (!(key in d)) continue;
    const v = d[key];
    if (kind === 'secret-json') out[col] = v ? box.seal(JSON.stringify(v), `databases.${col}`) : null;
    else out[col] = kind === 'json' ? JSON.stringify(v) : kind === 'bool' ? (v ? 1 : 0) : kind === 'secret' ? box.sealNullable(v as string | null, `databases.${col}`) : v;
  }
  return out;
}

export function databaseRow(r: DatabaseRow | undefined, box: SecretBox): DatabaseRecord | undefined {
  if (!r) return undefined;
  const out: Record<string, unknown> = { id: r.id };
  for (const [key, col, kind] of databaseColumns) {
    const v = r[col];
    if (kind === 'secret-json') out[key] = v ? JSON.parse(box.open(v as string, `databases.${col}`)) as unknown : null;
    else out[key] = kind === 'json' ? JSON.parse(v as string) as unknown : kind === 'bool' ? v === 1 : kind === 'secret' ? box.openNullable(v as string | null, `databases.${col}`) : v;
  }
  return out as unknown as DatabaseRecord;
}

export interface BackupRow {
  database_id: number; id: number; label: string; type: BackupRecord['type']; target: string; created: number; size_bytes: number; status: BackupRecord['status'];
}
export function backupRow(r: BackupRow): BackupRecord {
  return { databaseId: r.database_id, id: r.id, label: r.label, type: r.type, target: r.target, created: r.created, sizeBytes: r.size_bytes, status: r.status };
}

export interface OperationRow {
  id: string; database_id: number; kind: OperationRecord['kind']; payload: string; event_id: number | null; state: OperationRecord['state'];
  error: string | null; created: number; output?: string | null;
}
export function operationRow(r: OperationRow, box: SecretBox): OperationRecord {
  return {
    id: r.id, databaseId: r.database_id, kind: r.kind, payload: JSON.parse(box.open(r.payload, 'database_operations.payload')) as Record<string, unknown>,
    eventId: r.event_id, state: r.state, error: r.error, created: r.created, output: r.output ?? null,
  };
}

export interface MemberRow { database_id: number; member: number; agent_id: string; server_id: number | null; seed_since: number | null; seed_gtid: number | null }
export function memberRow(r: MemberRow): MemberPlacement {
  return {
    databaseId: r.database_id, member: r.member, agentId: r.agent_id, ...(r.server_id === null ? {} : { serverId: Number(r.server_id) }),
    ...(r.seed_since === null || r.seed_since === undefined ? {} : { seed: { since: Number(r.seed_since), gtid: Number(r.seed_gtid ?? 0) } }),
  };
}

export interface SlotRow { database_id: number; slot: string; claimed: number; taken: number | null }
export function slotRow(r: SlotRow): BackupSlot {
  return { databaseId: Number(r.database_id), slot: r.slot, claimed: Number(r.claimed), taken: r.taken === null ? null : Number(r.taken) };
}

export interface ReportRow {
  database_id: number; member: number; agent_id: string; state: string; role: string; gtid: string; address: string; reported: number;
}
export function reportRow(r: ReportRow): MemberReport {
  return { databaseId: Number(r.database_id), member: Number(r.member), agentId: r.agent_id, state: r.state, role: r.role, gtid: r.gtid, address: r.address, reported: Number(r.reported) };
}

export interface AgentRow {
  id: string; region: string; runtime: AgentRecord['runtime']; members_across_hosts: Flag; connected: Flag; replica: string; last_seen: number | null;
  applied_version: number; engines: string; lost_at: number | null; backup_store?: string; draining_at?: number | null;
}
export function agentRow(r: AgentRow): AgentRecord {
  return {
    id: r.id, region: r.region, runtime: r.runtime, membersAcrossHosts: r.members_across_hosts === 1, connected: r.connected === 1, replica: r.replica,
    lastSeen: r.last_seen, appliedVersion: r.applied_version, engines: JSON.parse(r.engines) as AgentRecord['engines'],
    lostAt: r.lost_at === null || r.lost_at === undefined ? null : Number(r.lost_at),
    drainingAt: r.draining_at === null || r.draining_at === undefined ? null : Number(r.draining_at),
    backupStore: r.backup_store ?? '',
  };
}

export interface JoinTokenRow {
  id: string; secret_hash: string; role: JoinTokenRecord['role']; host_id: string; region: string; created: number; expires: number; used_at: number | null;
}
export const joinTokenRow = (r: JoinTokenRow): JoinTokenRecord => ({
  id: r.id, secretHash: r.secret_hash, role: r.role, hostId: r.host_id, region: r.region, created: r.created, expires: r.expires, usedAt: r.used_at,
});

/** A fleet certificate's row with `host_removed` (CERT_STATE in queries.ts): 0/1 in SQLite, a boolean in PostgreSQL. */
export interface CertRow {
  serial: string; role: FleetCertState['role']; host_id: string; region: string; issued_at: number; not_after: number; revoked_at: number | null;
  host_removed: Flag | boolean;
}
export const certRow = (r: CertRow): FleetCertState => ({
  serial: r.serial, role: r.role, hostId: r.host_id, region: r.region, issuedAt: r.issued_at, notAfter: r.not_after, revokedAt: r.revoked_at,
  hostRemoved: Boolean(r.host_removed),
});
