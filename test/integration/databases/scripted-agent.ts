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
  /** Makes operations of this kind fail with the given error. */
  failOps(kind: string | undefined, error?: string): void;
  /** When true, operations are held (not answered) until released. */
  hold(v: boolean): void;
  report(): void;
  close(): void;
}

export function startScriptedAgent(target: string, opts: { id?: string; region?: string; engines?: string[]; credentials?: grpc.ChannelCredentials } = {}): ScriptedAgent {
  const proto = loadAgentProto();
  const client = new proto.fulcrum.v1.AgentService(target, opts.credentials ?? grpc.credentials.createInsecure(), channelOptions) as any;
  const call = client.Stream();
  let latest: AgentDesired__Output | undefined;
  const overrides = new Map<number, string>();
  const patchPending = new Set<number>();
  const backups = new Map<number, BackupInfo[]>();
  const results = new Map<string, OperationResult>();
  let failKind: string | undefined;
  let failError = '';
  let holding = false;
  let nextBackup = 1;
  let hello = true;

  const report = () => {
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
        backups: backups.get(Number(db.id)) ?? [],
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

  return {
    desired: () => latest,
    setStatus(id, status) {
      if (status === undefined) overrides.delete(id);
      else overrides.set(id, status);
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
    close() {
      call.end();
      call.cancel();
      client.close();
    },
  };
}
