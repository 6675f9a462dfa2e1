/**
 * The per-process commands. Each starts one composition root, writes where it listens into its
 * state folder (so the lab and scripts can find it), and shuts down cleanly on SIGINT/SIGTERM.
 */
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseFlags, type Flags } from '../lib/args.js';
import { parseFlagsWithConfig } from '../lib/config-file.js';
import { parseWireTime } from '../lib/clock.js';
import { isClientIpv6Prefix } from '../lib/client-key.js';
import { parseCidr } from '../lib/ipv4.js';
import { sayOnStderr } from '../lib/logger.js';
import type { ControlPlaneOptions } from '../control-plane/main.js';
import type { DataplaneOptions } from '../dataplane/main.js';
import type { StartAgentOptions } from '../agent/main.js';
import {
  agentFlags, backupStoreFlags, controlPlaneFlags, dataplaneFlags, dataplaneReloadFlags, joinTokenFlags, kekRotateFlags, secondsMs, storeMigrateFlags, tokenFlags,
} from './flags.js';

function onShutdown(close: () => Promise<void>): void {
  let closing = false;
  const stop = (signal: string) => {
    if (closing) return;
    closing = true;
    const timer = setTimeout(() => process.exit(1), 15_000);
    timer.unref();
    close().then(
      () => process.exit(0),
      (err: Error) => {
        sayOnStderr(`error while stopping on ${signal}: ${err.message}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

export function required<T>(v: T | undefined, name: string): T {
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

/** --client-ipv6-prefix (docs/security/traffic.md "Client keys"): 1 to 128, or undefined for the default. */
function ipv6PrefixFlag(f: Flags): number | undefined {
  const v = f['client-ipv6-prefix'];
  if (v === undefined) return undefined;
  if (!isClientIpv6Prefix(v)) throw new Error('--client-ipv6-prefix must be an integer from 1 to 128');
  return v;
}

/** A count flag that may be 0 (off) but not negative or fractional. */
function nonNegativeFlag(f: Flags, name: string): number | undefined {
  const v = f[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) throw new Error(`--${name} must be an integer, 0 or more`);
  return v;
}

/** A comma-separated flag as a list; undefined when the flag is absent. */
function list(v: unknown): string[] | undefined {
  return typeof v === 'string' ? v.split(',').map((x) => x.trim()).filter(Boolean) : undefined;
}

/**
 * The join endpoint's port when --bootstrap-port is not given (docs/security/grpc.md): the one
 * the last run used (hosts keep it for renewals, and tokens carry it), else beside gRPC.
 */
function defaultBootstrapPort(stateDir: string, grpcPort: number): number {
  try {
    const prev = JSON.parse(readFileSync(join(stateDir, 'control-plane.json'), 'utf8')) as { bootstrapAddress?: string };
    const port = Number(prev.bootstrapAddress?.split(':').pop());
    if (Number.isInteger(port) && port > 0) return port;
  } catch {
    // first start
  }
  return grpcPort === 0 ? 0 : grpcPort + 1;
}

/**
 * `fulcrum control-plane`'s flags (bin/flags.ts) as startControlPlane's options; throws on a bad
 * value, naming the flag. Reads the API's certificate files; starts nothing.
 */
export function controlPlaneOptions(argv: string[]): ControlPlaneOptions {
  const f = parseFlagsWithConfig(argv, controlPlaneFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  const [certFile, keyFile] = [f['api-cert'] as string | undefined, f['api-key'] as string | undefined];
  if ((certFile === undefined) !== (keyFile === undefined)) throw new Error('--api-cert and --api-key go together');
  const grpcPort = f['grpc-port'] as number;
  const [requestTimeoutMs, idleTimeoutMs] = [secondsMs(f, 'api-request-timeout'), secondsMs(f, 'api-idle-timeout')];
  const lostAfter = f['host-lost-after'] as number | undefined;
  // Shorter than a reboot or a switch replacement would take members from hosts about to return.
  if (lostAfter !== undefined && !(Number.isInteger(lostAfter) && lostAfter >= 60 && lostAfter <= 604_800)) throw new Error('--host-lost-after must be 60 to 604800 seconds');
  return {
    stateDir,
    kekFile: f['kek-file'] as string | undefined,
    store: f.store as string | undefined,
    apiHost: f['api-host'] as string | undefined,
    apiPort: f['api-port'] as number,
    apiInsecureListen: Boolean(f['api-insecure-listen']),
    apiListener: {
      requestTimeoutMs, idleTimeoutMs,
      maxConnections: f['api-max-connections'] as number | undefined,
      maxConnectionsPerAddress: f['api-max-connections-per-address'] as number | undefined,
    },
    bootstrapListener: {
      maxConnections: f['bootstrap-max-connections'] as number | undefined,
      maxConnectionsPerAddress: f['bootstrap-max-connections-per-address'] as number | undefined,
    },
    bootstrapRateLimit: f['bootstrap-rate-limit'] as number | undefined,
    grpcHost: f['grpc-host'] as string | undefined,
    grpcPort,
    bootstrapPort: (f['bootstrap-port'] as number | undefined) ?? defaultBootstrapPort(stateDir, grpcPort),
    insecureGrpc: Boolean(f['insecure-grpc']),
    nodebalancerPool: f['nodebalancer-pool'] as string | undefined,
    nodebalancerIpv6Pool: f['nodebalancer-ipv6-pool'] as string | undefined,
    databasePool: f['database-pool'] as string | undefined,
    hostnameSuffix: f['hostname-suffix'] as string | undefined,
    apiTls: certFile && keyFile ? { cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') } : undefined,
    metricsHost: f['metrics-host'] as string | undefined,
    metricsPort: f['metrics-port'] as number | undefined,
    rateLimits: Object.fromEntries(Object.entries({
      perToken: f['api-rate-limit'], stats: f['api-stats-rate-limit'], perIp: f['api-ip-rate-limit'], ipv6Prefix: ipv6PrefixFlag(f),
    }).filter(([, v]) => v !== undefined)),
    backendNetworks: list(f['backend-networks']),
    backendExcluded: list(f['backend-exclude']),
    hostLostAfterMs: lostAfter === undefined ? undefined : lostAfter * 1000,
  };
}

export async function runControlPlaneCommand(argv: string[]): Promise<void> {
  const opts = controlPlaneOptions(argv);
  const { startControlPlane } = await import('../control-plane/main.js');
  const cp = await startControlPlane(opts);
  const stateDir = opts.stateDir;
  writeFileSync(
    join(stateDir, 'control-plane.json'),
    JSON.stringify({ apiUrl: cp.apiUrl, grpcAddress: cp.grpcAddress, bootstrapAddress: cp.bootstrapAddress, metricsUrl: cp.metricsUrl ?? null, pid: process.pid }, null, 2),
  );
  onShutdown(() => cp.close());
}

/** `fulcrum dataplane`'s flags (bin/flags.ts) as startDataplane's options; throws on a bad value, naming the flag. */
export function dataplaneOptions(argv: string[]): DataplaneOptions & { workers: number } {
  const f = parseFlagsWithConfig(argv, dataplaneFlags);
  const workers = (f.workers as number | undefined) ?? availableParallelism();
  if (!Number.isInteger(workers) || workers < 1 || workers > 1024) throw new Error('--workers must be an integer from 1 to 1024');
  const distribution = f.distribution as string;
  if (distribution !== 'rr' && distribution !== 'kernel') throw new Error('--distribution must be rr or kernel');
  const drainTime = f['drain-time'] as number | undefined;
  if (drainTime !== undefined && !(drainTime >= 0 && drainTime <= 86_400)) throw new Error('--drain-time must be 0 to 86400 seconds');
  const workerApplyTimeoutMs = secondsMs(f, 'worker-apply-timeout');
  const stateDir = required(f.state as string | undefined, 'state');
  return {
    ...hostFlags(f),
    stateDir,
    nofile: f.nofile as number | undefined,
    endpointSource: f['endpoint-source'] as string | undefined,
    limits: {
      perClientPerNodeBalancer: f['max-conns-per-client'] as number | undefined,
      perClient: f['max-conns-per-client-total'] as number | undefined,
      perNodeBalancer: f['max-conns-per-nodebalancer'] as number | undefined,
      fdReserve: f['fd-reserve'] as number | undefined,
      tcpIdleTimeoutMs: f['tcp-idle-timeout'] === undefined ? undefined : (f['tcp-idle-timeout'] as number) * 1000,
      clientIpv6Prefix: ipv6PrefixFlag(f),
      udpNewSessionsPerSecond: nonNegativeFlag(f, 'udp-new-sessions-per-client'),
    },
    vrrp: vrrpFlags(f),
    workers,
    distribution,
    drainMs: drainTime === undefined ? undefined : drainTime * 1000,
    workerApplyTimeoutMs,
    wildcardListeners: Boolean(f['wildcard-listeners']),
  };
}

export async function runDataplaneCommand(argv: string[]): Promise<void> {
  // A worker forked by the data plane's primary (docs/dataplane.md, "Workers").
  if (cluster.isWorker) {
    const { runDataplaneWorker } = await import('../dataplane/workers/worker.js');
    return runDataplaneWorker();
  }
  if (argv[0] === 'reload') return reloadDataplane(argv.slice(1));
  const opts = dataplaneOptions(argv);
  const { startDataplane } = await import('../dataplane/main.js');
  const stateDir = opts.stateDir;
  mkdirSync(stateDir, { recursive: true });
  const dp = await startDataplane(opts);
  const workers = opts.workers;
  writeFileSync(join(stateDir, 'dataplane.json'), JSON.stringify({ pid: process.pid, metricsPort: dp.metricsPort ?? null, workers }, null, 2));
  onShutdown(() => dp.close());
  // A reload (new code, or a restart) that drops nothing: `fulcrum dataplane reload` sends SIGHUP.
  let reloading = false;
  const reload = (signal: string) => {
    if (reloading) return;
    reloading = true;
    sayOnStderr(`${signal}: reloading the data plane's workers\n`);
    dp.reload().then(
      () => sayOnStderr('reload: new workers serve, the old ones drain\n'),
      (err: Error) => sayOnStderr(`reload failed: ${err.message}\n`),
    ).finally(() => (reloading = false));
  };
  process.on('SIGHUP', () => reload('SIGHUP'));
  process.on('SIGUSR2', () => reload('SIGUSR2'));
}

/** `fulcrum dataplane reload --state DIR`: signals the data plane running from that folder. */
function reloadDataplane(argv: string[]): void {
  const f = parseFlags(argv, dataplaneReloadFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  const info = JSON.parse(readFileSync(join(stateDir, 'dataplane.json'), 'utf8')) as { pid?: number };
  if (typeof info.pid !== 'number') throw new Error(`no data plane pid in ${join(stateDir, 'dataplane.json')}`);
  process.kill(info.pid, 'SIGHUP');
  process.stdout.write(`sent SIGHUP to the data plane (pid ${info.pid})\n`);
}

/** Pair mode's flags (docs/multi-host.md); undefined without --vrrp-interface. */
function vrrpFlags(f: Flags) {
  const iface = f['vrrp-interface'] as string | undefined;
  if (iface === undefined) {
    if (f['vrrp-peers'] !== undefined || f['vrrp-priority'] !== undefined || f['vrrp-router-id'] !== undefined) throw new Error('--vrrp-peers, --vrrp-priority and --vrrp-router-id need --vrrp-interface');
    return undefined;
  }
  return { iface, peers: list(f['vrrp-peers']) ?? [], priority: (f['vrrp-priority'] as number | undefined) ?? 100, routerId: (f['vrrp-router-id'] as number | undefined) ?? 51 };
}

/**
 * The flags a data plane and an agent share: who the host is, how it reaches the control plane
 * (docs/security/grpc.md) and where its metrics listen.
 */
function hostFlags(f: Flags) {
  return {
    // With a certificate, id and region come from it (and may be left out here).
    id: f.id as string | undefined,
    region: f.region as string | undefined,
    join: f.join as string | undefined,
    insecureGrpc: Boolean(f['insecure-grpc']),
    controlPlane: required(f['control-plane'] as string | undefined, 'control-plane'),
    metricsHost: f['metrics-host'] as string | undefined,
    metricsPort: f['metrics-port'] as number | undefined,
  };
}

/** `fulcrum agent`'s flags (bin/flags.ts) as startAgent's options; throws on a bad value, naming the flag. */
export function agentOptions(argv: string[]): StartAgentOptions & { stopNodesOnExit: boolean } {
  const f = parseFlagsWithConfig(argv, agentFlags);
  const nodePool = f['node-pool'] as string | undefined;
  if (nodePool !== undefined && !parseCidr(nodePool)) throw new Error('--node-pool must be an IPv4 CIDR such as 198.18.110.0/28');
  const runtime = f.runtime as string;
  if (runtime !== 'process' && runtime !== 'docker') throw new Error('--runtime must be process or docker');
  const stateDir = required(f.state as string | undefined, 'state');
  return {
    ...hostFlags(f),
    stateDir,
    runtime,
    binlogArchiveMs: secondsMs(f, 'binlog-archive-interval'),
    enginesFile: f.engines as string | undefined,
    nodeAddressPool: nodePool, backupStore: backupStoreFlags(argv, f),
    stopNodesOnExit: Boolean(f['stop-nodes-on-exit']),
  };
}

export async function runAgentCommand(argv: string[]): Promise<void> {
  const { stopNodesOnExit, ...opts } = agentOptions(argv);
  const { startAgent } = await import('../agent/main.js');
  const stateDir = opts.stateDir;
  const agent = await startAgent(opts);
  writeFileSync(join(stateDir, 'agent.json'), JSON.stringify({ pid: process.pid, metricsPort: agent.metricsPort ?? null }, null, 2));
  onShutdown(() => agent.close({ stopNodes: stopNodesOnExit }));
}

type Store = Awaited<ReturnType<typeof import('../control-plane/store/open.js')['openStore']>>;

/** Opens the control plane's store as `--state`, `--store` and `--kek-file` say, runs `fn`, closes it. */
export async function withStore<T>(stateDir: string, f: Flags, fn: (store: Store) => Promise<T>): Promise<T> {
  const { openStore } = await import('../control-plane/store/open.js');
  const store = await openStore(stateDir, { store: f.store as string | undefined, kekFile: f['kek-file'] as string | undefined });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

export async function runTokenCreate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, tokenFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  const { AuthService } = await import('../control-plane/domain/auth/auth-service.js');
  const { validateScopes } = await import('../control-plane/domain/auth/scopes.js');
  const { systemClock } = await import('../lib/clock.js');
  await withStore(stateDir, f, async (store) => {
    const users = store.users;
    const auth = new AuthService(users, store.tokens, systemClock);
    const scopes = (f.scopes as string | undefined) ?? '*';
    const bad = validateScopes(scopes);
    if (bad) throw new Error(bad);
    let expiry: number | null = null;
    if (f.expiry) {
      expiry = parseWireTime(f.expiry as string);
      if (Number.isNaN(expiry)) throw new Error('--expiry must look like 2030-01-01T00:00:00');
    }
    const username = (f.user as string | undefined) ?? 'admin';
    let user = await users.byUsername(username);
    if (!user) {
      const global: Record<string, boolean> = {};
      for (const g of ((f.grants as string | undefined) ?? '').split(',').filter(Boolean)) global[g] = true;
      user = await auth.createUser(username, Boolean(f.restricted), { global, nodebalancer: {}, database: {} });
    }
    const { secret } = await auth.issueToken(user.id, { label: (f.label as string | undefined) ?? 'cli', scopes, expiry });
    process.stdout.write(`${secret}\n`);
  });
}

/**
 * `fulcrum join-token create`: a one-time token for a new data plane or agent, made on the
 * control plane's host from its state folder (the same as POST /v4/fulcrum/join-tokens). The
 * token carries the bootstrap port, so the control plane must have started once.
 */
export async function runJoinTokenCreate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, joinTokenFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  let bootstrapPort = 0;
  try {
    const info = JSON.parse(readFileSync(join(stateDir, 'control-plane.json'), 'utf8')) as { bootstrapAddress?: string };
    bootstrapPort = Number(info.bootstrapAddress?.split(':').pop() ?? 0);
  } catch {
    // handled below
  }
  if (!bootstrapPort) throw new Error(`no running control plane found in ${stateDir} (control-plane.json): start it first, the token carries its bootstrap port`);
  const { FleetCa } = await import('../control-plane/domain/fleet/ca.js');
  const { FleetService } = await import('../control-plane/domain/fleet/fleet-service.js');
  const { RegionCatalogue } = await import('../control-plane/domain/regions.js');
  const { systemClock } = await import('../lib/clock.js');
  await withStore(stateDir, f, async (store) => {
    const fleet = new FleetService({ repo: store.fleet, ca: FleetCa.open(stateDir), regions: new RegionCatalogue(), clock: systemClock, bootstrapPort: () => bootstrapPort });
    const t = await fleet.createJoinToken({ role: f.role, id: f.id, region: f.region ?? '*', ...(f['expiry-seconds'] !== undefined ? { expiry_seconds: f['expiry-seconds'] } : {}) });
    process.stdout.write(`${t.token}\n`);
  });
}

/**
 * `fulcrum store migrate`: brings the store's schema up to date (SQLite file or PostgreSQL) and
 * says which migrations it now has, so an operator can migrate before starting the replicas
 * (docs/install.md, "PostgreSQL"). Starting a control plane migrates too; this is the same work
 * on its own.
 */
export async function runStoreMigrate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, storeMigrateFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  await withStore(stateDir, f, async (store) => {
    const ids = await store.migrations();
    process.stdout.write(`${store.kind} store at migration ${ids.at(-1) ?? '(none)'} (${ids.length} applied)\n`);
  });
}

/** `fulcrum kek rotate`: a new key-encryption key for the control plane's secrets (docs/security/secrets.md). */
export async function runKekRotate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, kekRotateFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  const { rotateKek } = await import('../control-plane/store/sqlite/database.js');
  const r = rotateKek(join(stateDir, 'control-plane.sqlite'), { kekFile: f['kek-file'] as string | undefined });
  process.stdout.write(`key ${r.keyId} now seals every secret (${r.resealed} re-sealed)\n`);
}
