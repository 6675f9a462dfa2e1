import { makePrivate, restrictUmask } from '../lib/private-files.js';
import type { Server } from 'node:http';
import type { Registry } from 'prom-client';
import { systemClock, type Clock } from '../lib/clock.js';
import { createLogger, type Logger } from '../lib/logger.js';
import { createRegistry, serveMetrics } from '../lib/metrics.js';
import { createAgent, type Agent } from './agent.js';
import { detectLocalCatalogue, loadCatalogueFile, type Catalogue } from './catalogue.js';
import { createControlStream } from './control-stream.js';
import { createDayTwo, type DayTwo } from './day-two.js';
import type { BackupStorage } from './backup/backup-storage.js';
import { createS3Stores, type S3StoreConfig, type S3Stores } from './backup/s3-store.js';
import { storeIdentity } from './backup/store-config.js';
import { LABEL_AGENT, type ContainerRuntime } from './runtime/container-runtime.js';
import { createProcessRuntime } from './runtime/process-runtime.js';
import { prepareHostSecurity } from '../lib/fleet-host.js';
import { existingNodeGroupId } from './runtime/node-user.js';
import { controlPlaneAddresses, type ControlPlaneTarget } from '../lib/control-plane-client.js';
import type { RoundOptions } from './binlog/archiver.js';

export interface StartAgentOptions {
  /** Optional with a certificate, whose id and region are the only ones it may claim. */
  id?: string;
  region?: string;
  /** The control plane's gRPC server, host:port, or its replicas (`a:port,b:port` or a list). */
  controlPlane: ControlPlaneTarget;
  /** A one-time join token (docs/security/grpc.md): join the fleet before starting. */
  join?: string;
  /** Plain gRPC without a certificate: only with the operator's explicit --insecure-grpc. */
  insecureGrpc?: boolean;
  /** Everything the agent keeps: desired state, secrets, node data, backups. */
  stateDir: string;
  /** `process` (local mariadbd) or `docker`; or a ready ContainerRuntime (tests). */
  runtime: 'process' | 'docker' | ContainerRuntime;
  /** Engines this agent can run; default: the local server binaries it finds (process runtime). */
  catalogue?: Catalogue;
  /** The operator's engine file, listed ahead of the detected engines (agent/catalogue.ts). */
  enginesFile?: string;
  /**
   * Pool of addresses for nodes (each node listens on its own address, port 3306); across hosts
   * the data planes must reach them (docs/multi-host.md). Default 127.79.0.0/16.
   */
  nodeAddressPool?: string;
  metricsHost?: string;
  metricsPort?: number;
  logger?: Logger;
  registry?: Registry;
  clock?: Clock;
  heartbeatMs?: number;
  /** Period of the observe/reconcile loop (also the failover detection period). */
  reconcileIntervalMs?: number;
  /** Period of each database's binlog archive round (default day-two.ts BINLOG_ARCHIVE_MS). */
  binlogArchiveMs?: number;
  /** Where backups and binlog segments go (default: `<stateDir>/backups`; tests wrap it). */
  backupStorage?: BackupStorage;
  /**
   * An S3-compatible object store for backups and the binlog archive (docs/agent.md, "Backup
   * store"), instead of the state folder. Its credentials are never logged.
   */
  backupStore?: S3StoreConfig;
}

export interface RunningAgent {
  agent: Agent;
  runtime: ContainerRuntime;
  /** The port /metrics listens on when asked for (port 0 picks one). */
  metricsPort?: number;
  /**
   * Stops the agent's own work (stream, loops). Database nodes keep running
   * (an agent restart must not interrupt them) unless `stopNodes` is set, as the lab does on
   * Ctrl-C: then every node of this agent is stopped gracefully, data kept, and the next start
   * of the agent starts them again.
   */
  close(opts?: { stopNodes?: boolean }): Promise<void>;
  /** An archive round of database `id` now, optionally with a physical base (DayTwo.archiveNow). */
  archiveNow(id: number, o?: RoundOptions): Promise<void>;
}

async function makeRuntime(kind: 'process' | 'docker', stateDir: string, logger: Logger): Promise<ContainerRuntime> {
  if (kind === 'process') return createProcessRuntime({ root: `${stateDir}/runtime`, logger });
  // The docker adapter is loaded lazily so that a process-only host needs no Docker socket.
  const path = './runtime/docker-runtime.js';
  const mod = (await import(path)) as { createDockerRuntime: (o: { stateDir: string; logger: Logger }) => ContainerRuntime };
  return mod.createDockerRuntime({ stateDir, logger });
}

/** The images this Docker host has built or pulled for the lab (loaded lazily, like the adapter). */
async function dockerCatalogue(): Promise<Catalogue> {
  const path = './runtime/docker-catalogue.js';
  const mod = (await import(path)) as { detectDockerCatalogue: () => Promise<Catalogue> };
  return mod.detectDockerCatalogue();
}

/** The agent's composition root. */
export async function startAgent(opts: StartAgentOptions): Promise<RunningAgent> {
  const controlPlane = controlPlaneAddresses(opts.controlPlane);
  const logger = opts.logger ?? createLogger('agent');
  const clock = opts.clock ?? systemClock;
  const registry = opts.registry ?? createRegistry('agent');
  // Private state: umask 077 and the folder made 0700/0600 again (docs/security/secrets.md); the
  // database servers' group keeps search (not read) permission on the folders shared with them.
  restrictUmask();
  makePrivate(opts.stateDir, { shareGroup: existingNodeGroupId() });
  const security = await prepareHostSecurity({ stateDir: opts.stateDir, controlPlane, role: 'agent', join: opts.join, insecure: opts.insecureGrpc, logger });
  const me = security.identity;
  if (me && ((opts.id && opts.id !== me.id) || (opts.region && opts.region !== me.region))) {
    security.close();
    throw new Error(`this agent's certificate is for ${me.id} in region ${me.region}; --id and --region must match it or be left out`);
  }
  const id = me?.id ?? opts.id ?? 'agent-1';
  const region = me?.region ?? opts.region ?? '*';
  const runtimeKind = typeof opts.runtime === 'string' ? opts.runtime : (opts.runtime.kind as 'process' | 'docker');
  const runtime = typeof opts.runtime === 'string' ? await makeRuntime(opts.runtime, opts.stateDir, logger) : opts.runtime;
  const catalogue = opts.catalogue ?? [
    ...(opts.enginesFile ? loadCatalogueFile(opts.enginesFile) : []),
    ...(runtimeKind === 'process' ? await detectLocalCatalogue() : await dockerCatalogue()),
  ];

  const remote: S3Stores | undefined = opts.backupStore ? createS3Stores(opts.backupStore) : undefined;
  if (opts.backupStore) logger.info({ bucket: opts.backupStore.bucket, prefix: opts.backupStore.prefix, endpoint: opts.backupStore.endpoint ?? '(AWS)' }, 'backups go to an object store');
  // The day-two services the agent builds (archive, backups), for archiveNow below.
  let dayTwo: DayTwo | undefined;
  const agent = createAgent({
    id,
    stateDir: opts.stateDir,
    runtime,
    runtimeKind,
    catalogue,
    logger,
    registry,
    clock,
    nodeAddressPool: opts.nodeAddressPool,
    ...(opts.backupStore ? { backupStore: storeIdentity(opts.backupStore) } : {}),
    reconcileIntervalMs: opts.reconcileIntervalMs,
    extras: (a) => (dayTwo = createDayTwo(a, {
      binlogArchiveMs: opts.binlogArchiveMs,
      storage: opts.backupStorage ?? remote?.backups,
      ...(remote ? { segments: remote.segments, leases: remote.leases, remote: true } : {}),
    })),
  });
  await agent.start();
  for (const e of catalogue) {
    runtime.prepare?.({ id: e.id, version: e.version, binary: e.binary, image: e.image })?.catch((err) => logger.warn({ err, engine: e.id }, 'engine warm-up failed'));
  }

  const stream = createControlStream({
    target: controlPlane,
    security,
    agentId: id,
    region: region,
    logger,
    clock,
    heartbeatMs: opts.heartbeatMs,
    observe: () => agent.report(),
    onDesired: (d) => agent.setDesired(d),
    onConnectedChange: (connected) => agent.controlPlaneConnected(connected),
  });
  agent.onChange(() => stream.notify());
  security.onRenewed(() => stream.reconnect());

  let metricsServer: Server | undefined;
  if (opts.metricsPort !== undefined) {
    metricsServer = await serveMetrics(registry, opts.metricsHost ?? '127.0.0.1', opts.metricsPort);
  }
  logger.info({ agent: id, region, runtime: runtime.kind, engines: catalogue.map((e) => e.id) }, 'agent started');

  const metricsAddr = metricsServer?.address();
  return {
    agent,
    runtime,
    metricsPort: metricsAddr && typeof metricsAddr === 'object' ? metricsAddr.port : undefined,
    archiveNow: (id, o) => (dayTwo ? dayTwo.archiveNow(id, o) : Promise.reject(new Error('the agent has no archive'))),
    async close(closeOpts?: { stopNodes?: boolean }) {
      security.close();
      await stream.close();
      await agent.close();
      if (closeOpts?.stopNodes) {
        const nodes = await runtime.list({ [LABEL_AGENT]: id });
        await Promise.all(nodes.filter((n) => n.state === 'running').map((n) => runtime.stop(n.name).catch((err: Error) => logger.warn({ err, node: n.name }, 'node did not stop'))));
      }
      await runtime.close();
      remote?.close();
      await new Promise<void>((resolve) => (metricsServer ? metricsServer.close(() => resolve()) : resolve()));
    },
  };
}
