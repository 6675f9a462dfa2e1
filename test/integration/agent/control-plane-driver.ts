/**
 * A minimal AgentService server for agent integration tests: it records the agent's reports
 * and pushes the desired state a test sets. It stands in for the control plane's push layer
 * only; the agent, the servers and the clients are all real.
 */
import { loadAgentProto, grpc, serverOptions } from '../../../lib/grpc.js';
import type { AgentDesired } from '../../../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentReport__Output } from '../../../proto/gen/fulcrum/v1/AgentReport.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { Operation } from '../../../proto/gen/fulcrum/v1/Operation.js';
import type { ObservedDatabase__Output } from '../../../proto/gen/fulcrum/v1/ObservedDatabase.js';
import { DriverDataplane } from './driver-dataplane.js';

export interface Driver {
  target: string;
  reports: AgentReport__Output[];
  last(): AgentReport__Output | undefined;
  db(id: number): ObservedDatabase__Output | undefined;
  /** `deleted`: the ids sent as deleted (AgentDesired.deleted_databases), as the control plane names a delete. */
  setDatabases(dbs: DesiredDatabase[], o?: { deleted?: number[] }): void;
  /** Sends this message as it is (a forged or truncated desired state), bypassing the driver's own state. */
  sendRaw(d: Omit<AgentDesired, 'version'>): void;
  addOperation(op: Operation): void;
  ackOperation(id: string): void;
  waitFor<T>(fn: () => T | undefined | false, timeoutMs?: number, what?: string): Promise<T>;
  /** The data plane serving the databases' endpoints (with `endpointSource` only). */
  dataplane?: DriverDataplane;
  close(): Promise<void>;
}

/**
 * `endpointSource`: also run a data plane that serves the endpoints from this source address,
 * which every desired database names in `proxySources` (unless the test sets its own).
 */
export async function startDriver(opts: { endpointSource?: string } = {}): Promise<Driver> {
  const dataplane = opts.endpointSource ? new DriverDataplane(opts.endpointSource) : undefined;
  const proto = loadAgentProto();
  const server = new grpc.Server(serverOptions);
  const streams = new Set<grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>>();
  const reports: AgentReport__Output[] = [];
  let version = 0;
  let databases: DesiredDatabase[] = [];
  let operations: Operation[] = [];
  let deleted: number[] = [];
  // Like the control plane, it marks an empty list as intended (the agent's mass-delete guard).
  const current = (): AgentDesired => ({ version, databases, operations, deleteAllIntended: databases.length === 0, deletedDatabases: deleted });
  const route = () => dataplane?.update(databases, (id) => reports[reports.length - 1]?.databases.find((d) => Number(d.id) === id));
  const push = () => {
    version++;
    for (const s of streams) s.write(current());
  };
  server.addService(proto.fulcrum.v1.AgentService.service, {
    Stream: (call: grpc.ServerDuplexStream<AgentReport__Output, AgentDesired>) => {
      streams.add(call);
      call.on('data', (r: AgentReport__Output) => {
        reports.push(r);
        if (reports.length > 2000) reports.splice(0, 1000);
        route();
        if (r.hello) call.write(current());
      });
      const gone = () => streams.delete(call);
      call.on('end', () => {
        gone();
        call.end();
      });
      call.on('error', gone);
      call.on('cancelled', gone);
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync('127.0.0.1:0', grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  const driver: Driver = {
    target: `127.0.0.1:${port}`,
    reports,
    last: () => reports[reports.length - 1],
    db: (id) => reports[reports.length - 1]?.databases.find((d) => d.id === id),
    sendRaw(d) {
      version++;
      for (const s of streams) s.write({ ...d, version });
    },
    setDatabases(dbs, o = {}) {
      deleted = o.deleted ?? [];
      databases = dataplane ? dbs.map((d) => ({ ...d, proxySources: d.proxySources ?? [dataplane.source] })) : dbs;
      push();
      route();
    },
    addOperation(op) {
      operations = [...operations, op];
      push();
    },
    ackOperation(id) {
      operations = operations.filter((o) => o.operationId !== id);
      push();
    },
    async waitFor(fn, timeoutMs = 30_000, what = 'condition') {
      const end = Date.now() + timeoutMs;
      for (;;) {
        const v = fn();
        if (v) return v as any;
        if (Date.now() > end) throw new Error(`timed out waiting for ${what}; last report: ${JSON.stringify(driver.last()?.databases.map((d) => ({ id: d.id, status: d.status, error: d.error, nodes: d.nodes })))}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    },
    dataplane,
    async close() {
      for (const s of streams) s.end();
      server.forceShutdown();
      await dataplane?.close();
    },
  };
  return driver;
}

/**
 * A /24 inside a /16 (`127.78` endpoints, `127.79` nodes) reserved for one agent test file, so
 * parallel files never share addresses. Slots 20-39 belong to test/integration/agent; the lab
 * allocates from the bottom of its pools and the e2e labs use 100-249.
 */
export function testNet(prefix: string, slot: number): string {
  if (slot < 20 || slot > 39) throw new Error(`slot ${slot} is outside 20-39`);
  return `${prefix}.${slot}`;
}

export function desiredDb(over: Partial<DesiredDatabase> & { id: number; hostPrimary: string; hostSecondary: string }): DesiredDatabase {
  return {
    label: `db-${over.id}`,
    engineId: '',
    version: '',
    type: { id: 'g6-nanode-1', memoryMb: 1024, vcpus: 1, diskMb: 25600 },
    clusterSize: 1,
    replicationType: 'none',
    sslConnection: true,
    encrypted: false,
    allowList: [],
    updates: { frequency: 'weekly', duration: 3, hourOfDay: 0, dayOfWeek: 7, weekOfMonth: 0 },
    rootPassword: 'Initial.Pass_01',
    state: 'running',
    port: 3306,
    generation: 1,
    ...over,
  };
}

/**
 * mysql2 3.x accepts `localAddress` but does not use it (it calls net.connect(port, host)), so
 * a client with a chosen source address must hand mysql2 its own socket.
 */
export async function connectFrom(opts: {
  source: string;
  host: string;
  port: number;
  user: string;
  password: string;
  ca?: string;
  timeoutMs?: number;
}): Promise<import('mysql2/promise').Connection> {
  const { connect } = await import('node:net');
  const mysql = (await import('mysql2/promise')).default;
  const sock = connect({ host: opts.host, port: opts.port, localAddress: opts.source });
  return mysql.createConnection({
    stream: sock,
    host: opts.host,
    port: opts.port,
    user: opts.user,
    password: opts.password,
    connectTimeout: opts.timeoutMs ?? 3000,
    ...(opts.ca ? { ssl: { ca: opts.ca } } : {}),
  });
}

let operationSeq = 0;

/** Sends one operation, waits for its result, acknowledges it (the control plane's part). */
export async function runOperation(
  driver: Driver,
  databaseId: number,
  body: Omit<Operation, 'operationId' | 'databaseId'>,
  timeoutMs = 60_000,
): Promise<{ ok: boolean; error: string; backupId: number }> {
  const operationId = `op-${process.pid}-${++operationSeq}`;
  driver.addOperation({ operationId, databaseId, ...body });
  const r = await driver.waitFor(() => driver.last()?.operationResults.find((x) => x.operationId === operationId), timeoutMs, operationId);
  driver.ackOperation(operationId);
  return { ok: r.ok, error: r.error, backupId: Number(r.backupId) };
}

/**
 * Stores a backup with the given SQL through the agent's storage port, with a correct
 * checksum and manifest: what a restore sees is a backup that passes verification.
 */
export async function craftBackup(
  stateDir: string,
  m: { databaseId: number; id: number; label: string; engineVersion: string; sql: Buffer; type?: 'snapshot' | 'pre-restore' },
): Promise<void> {
  const { gzipSync } = await import('node:zlib');
  const { createHash } = await import('node:crypto');
  const { join } = await import('node:path');
  const { createLocalBackupStorage } = await import('../../../agent/backup/backup-storage.js');
  const storage = createLocalBackupStorage(join(stateDir, 'backups'));
  const body = gzipSync(m.sql);
  const out = await storage.writer(m.databaseId, m.id, 'dump.sql.gz');
  await new Promise<void>((resolve, reject) => out.end(body, () => resolve()).on('error', reject));
  await storage.commit({
    id: m.id, databaseId: m.databaseId, label: m.label, type: m.type ?? 'snapshot', target: 'primary', createdMs: Date.now(), finishedMs: Date.now(),
    engineVersion: m.engineVersion, gtidPos: '', format: 'mariadb-dump+gzip', file: 'dump.sql.gz', sizeBytes: body.length,
    sha256: createHash('sha256').update(body).digest('hex'), databases: [],
  });
}

/**
 * SQL shaped like one of our dumps that fails halfway: it drops and re-creates `schema`, loads
 * a row, then hits a syntax error followed by more input the client never reads.
 */
export function halfBrokenDump(schema: string, table: string): Buffer {
  return Buffer.concat([
    Buffer.from(`DROP DATABASE IF EXISTS \`${schema}\`;\nCREATE DATABASE \`${schema}\`;\nCREATE TABLE \`${schema}\`.\`${table}\` (id INT PRIMARY KEY);\nINSERT INTO \`${schema}\`.\`${table}\` VALUES (424242);\nTHIS IS NOT SQL;\n`),
    Buffer.alloc(8 * 1024 * 1024, '-- filler\n'),
  ]);
}
