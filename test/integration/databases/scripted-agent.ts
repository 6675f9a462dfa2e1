import { channelOptions, grpc, loadAgentProto } from '../../../lib/grpc.js';
import type { AgentDesired__Output } from '../../../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentReport } from '../../../proto/gen/fulcrum/v1/AgentReport.js';
import type { BackupInfo } from '../../../proto/gen/fulcrum/v1/BackupInfo.js';
import type { OperationResult } from '../../../proto/gen/fulcrum/v1/OperationResult.js';

/**
 * A scripted peer for control-plane integration tests: a real gRPC client of AgentService that
 * runs no servers. It reports every desired database as `status` (default active) at the desired
 * generation and answers operations at once (snapshots become ready backups). The real agent is
 * exercised by the e2e tests; this one lets the API's state rules be tested in seconds.
 */
export interface ScriptedAgent {
  desired(): AgentDesired__Output | undefined;
  /** Overrides the status reported for a database (e.g. 'degraded', 'failed', 'provisioning'). */
  setStatus(id: number, status: string | undefined): void;
  /** Reports a new engine build waiting for the window (patch_pending) for a database. */
  setPatchPending(id: number, pending: boolean): void;
  /** Reports the oldest restorable instant (ms) of a database (0 = none), as the binlog archive does. */
  setOldestRestore(id: number, ms: number): void;
  /** Reports the last auto-backup day taken for a database (YYYY-MM-DD), as the agent's state.json keeps it. */
  setAutoBackupDay(id: number, day: string): void;
  /** Makes operations of this kind fail with the given error. */
  failOps(kind: string | undefined, error?: string): void;
  /** When true, operations are held (not answered) until released. */
  hold(v: boolean): void;
  report(): void;
  /** Stops every report (heartbeats too) while the stream stays open: a link cut before keepalive notices. */
  mute(v: boolean): void;
  /** Overrides what is reported of a local member (membersAcrossHosts agents). */
  setNode(id: number, member: number, node: { state?: string; role?: string; gtid?: string } | undefined): void;
  close(): void;
}

/**
 * With `membersAcrossHosts` the agent says it can run part of a cluster, reports one node per
 * member the desired state marks local (member k at 127.80.0.k:3306, GTID 0-1-(10+k) unless set,
 * primary when the control plane names it) and sends a heartbeat every `heartbeatMs` (default
 * 1 s), as the real agent does.
 */
export function startScriptedAgent(target: string, opts: { id?: string; region?: string; engines?: string[]; credentials?: grpc.ChannelCredentials; membersAcrossHosts?: boolean; heartbeatMs?: number } = {}): ScriptedAgent {
  const proto = loadAgentProto();
  const client = new proto.fulcrum.v1.AgentService(target, opts.credentials ?? grpc.credentials.createInsecure(), channelOptions) as any;
  const call = client.Stream();
  let latest: AgentDesired__Output | undefined;
  const overrides = new Map<number, string>();
  const patchPending = new Set<number>();
  const oldestRestore = new Map<number, number>();
  const autoBackupDays = new Map<number, string>();
  const backups = new Map<number, BackupInfo[]>();
  const results = new Map<string, OperationResult>();
  let failKind: string | undefined;
  let failError = '';
  let holding = false;
  let nextBackup = 1;
  let hello = true;
  let muted = false;
  const nodeOverrides = new Map<string, { state?: string; role?: string; gtid?: string }>();
  const nodesOf = (db: AgentDesired__Output['databases'][number]) => (opts.membersAcrossHosts ? db.members : []).filter((m) => m.local).map((m) => {
    const o = nodeOverrides.get(`${db.id}:${m.index}`) ?? {};
    const primary = Number(db.primaryMember || 1) === m.index;
    return { name: `scripted-db${db.id}-n${m.index}`, member: m.index, address: `127.80.0.${m.index}`, port: 3306, state: o.state ?? 'running', role: o.role ?? (primary ? 'primary' : 'replica'), replicationOk: true, gtidCurrentPos: o.gtid ?? `0-1-${10 + m.index}` };
  });

  const report = () => {
    if (muted) return;
    const d = latest;
    if (d && !holding) {
      for (const op of d.operations) {
        if (results.has(op.operationId)) continue;
        const dbId = Number(op.databaseId);
        const fail = failKind === op.kind;
        const r: OperationResult = { operationId: op.operationId, databaseId: dbId, ok: !fail, error: fail ? failError : '', finishedMs: Date.now() };
        if (!fail && op.kind === 'snapshot' && op.snapshot) {
          const id = nextBackup++;
          backups.set(dbId, [...(backups.get(dbId) ?? []), { id, label: op.snapshot.label, type: 'snapshot', createdMs: Date.now(), status: 'ready', target: op.snapshot.target }]);
          r.backupId = id;
        }
        if (!fail && op.kind === 'deleteBackup' && op.deleteBackup) {
          backups.set(dbId, (backups.get(dbId) ?? []).filter((b) => Number(b.id) !== Number(op.deleteBackup!.backupId)));
        }
        results.set(op.operationId, r);
      }
    }
    const pendingIds = new Set((d?.operations ?? []).map((o) => o.operationId));
    const msg: AgentReport = {
      agentId: opts.id ?? 'scripted-agent',
      region: opts.region ?? '',
      atMs: Date.now(),
      hello,
      appliedVersion: d?.version ?? 0,
      runtime: 'process',
      membersAcrossHosts: !!opts.membersAcrossHosts,
      engines: (opts.engines ?? []).map((id) => ({ id, engine: 'mysql', version: id.split('/')[1], binary: '/bin/false' })),
      databases: (d?.databases ?? []).map((db) => ({
        id: db.id,
        status: overrides.get(Number(db.id)) ?? (db.state === 'suspended' ? 'suspended' : 'active'),
        members: { [db.hostPrimary]: 'primary' },
        hostPrimary: db.hostPrimary,
        hostSecondary: db.hostSecondary,
        port: db.port,
        caCertPem: '-----BEGIN CERTIFICATE-----\nscripted\n-----END CERTIFICATE-----\n',
        convergedGeneration: db.generation,
        usedDiskMb: 2048,
        patchPending: patchPending.has(Number(db.id)),
        oldestRestoreMs: oldestRestore.get(Number(db.id)) ?? 0,
        lastAutoBackupDay: autoBackupDays.get(Number(db.id)) ?? '',
        backups: backups.get(Number(db.id)) ?? [],
        nodes: nodesOf(db),
      })),
      operationResults: [...results.values()].filter((r) => pendingIds.has(r.operationId!)),
    };
    hello = false;
    call.write(msg);
  };

  call.on('data', (d: AgentDesired__Output) => {
    if (!latest || d.version >= latest.version) latest = d;
    report();
  });
  call.on('error', () => undefined);
  report();
  // A real agent reports every few seconds whatever its kind: a test that needs that asks for it.
  const heartbeat = opts.membersAcrossHosts || opts.heartbeatMs !== undefined ? setInterval(report, opts.heartbeatMs ?? 1000) : undefined;

  return {
    desired: () => latest,
    setStatus(id, status) {
      if (status === undefined) overrides.delete(id);
      else overrides.set(id, status);
      report();
    },
    setOldestRestore(id, ms) {
      oldestRestore.set(id, ms);
      report();
    },
    setAutoBackupDay(id, day) {
      autoBackupDays.set(id, day);
      report();
    },
    setPatchPending(id, pending) {
      if (pending) patchPending.add(id);
      else patchPending.delete(id);
      report();
    },
    failOps(kind, error = 'scripted failure') {
      failKind = kind;
      failError = error;
    },
    hold(v) {
      holding = v;
      report();
    },
    report,
    mute(v) {
      muted = v;
      report();
    },
    setNode(id, member, node) {
      if (node === undefined) nodeOverrides.delete(`${id}:${member}`);
      else nodeOverrides.set(`${id}:${member}`, node);
      report();
    },
    close() {
      clearInterval(heartbeat);
      call.end();
      call.cancel();
      client.close();
    },
  };
}
