/**
 * The per-process commands. Each starts one composition root, writes where it listens into its
 * state folder (so the lab and scripts can find it), and shuts down cleanly on SIGINT/SIGTERM.
 */
import cluster from 'node:cluster';
import { availableParallelism } from 'node:os';
import { readFileSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseFlags } from '../lib/args.js';
import { parseFlagsWithConfig } from '../lib/config-file.js';
import { parseWireTime } from '../lib/clock.js';
import { isClientIpv6Prefix } from '../lib/client-key.js';
import { parseCidr } from '../lib/ipv4.js';

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
        process.stderr.write(`error while stopping on ${signal}: ${err.message}\n`);
        process.exit(1);
      },
    );
  };
  process.on('SIGINT', () => stop('SIGINT'));
  process.on('SIGTERM', () => stop('SIGTERM'));
}

function required<T>(v: T | undefined, name: string): T {
  if (v === undefined) throw new Error(`--${name} is required`);
  return v;
}

/** --client-ipv6-prefix (docs/security/traffic.md "Client keys"): 1 to 128, or undefined for the default. */
function ipv6PrefixFlag(f: Record<string, unknown>): number | undefined {
  const v = f['client-ipv6-prefix'];
  if (v === undefined) return undefined;
  if (!isClientIpv6Prefix(v)) throw new Error('--client-ipv6-prefix must be an integer from 1 to 128');
  return v;
}

/** A count flag that may be 0 (off) but not negative or fractional. */
function nonNegativeFlag(f: Record<string, unknown>, name: string): number | undefined {
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

export async function runControlPlaneCommand(argv: string[]): Promise<void> {
  const f = parseFlagsWithConfig(argv, {
    state: 'string', 'api-host': 'string', 'api-port': 'number', 'grpc-host': 'string', 'grpc-port': 'number',
    'nodebalancer-pool': 'string', 'nodebalancer-ipv6-pool': 'string', 'database-pool': 'string', 'hostname-suffix': 'string', 'kek-file': 'string',
    'api-cert': 'string', 'api-key': 'string', 'metrics-host': 'string', 'metrics-port': 'number',
    'api-rate-limit': 'number', 'api-stats-rate-limit': 'number', 'api-ip-rate-limit': 'number', 'client-ipv6-prefix': 'number',
    'backend-networks': 'string', 'backend-exclude': 'string', 'bootstrap-port': 'number', 'insecure-grpc': 'boolean', store: 'string',
    'api-insecure-listen': 'boolean', 'api-request-timeout': 'number', 'api-idle-timeout': 'number',
    'api-max-connections': 'number', 'api-max-connections-per-address': 'number',
    'bootstrap-max-connections': 'number', 'bootstrap-max-connections-per-address': 'number', 'bootstrap-rate-limit': 'number',
  });
  const { startControlPlane } = await import('../control-plane/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  const [certFile, keyFile] = [f['api-cert'] as string | undefined, f['api-key'] as string | undefined];
  if ((certFile === undefined) !== (keyFile === undefined)) throw new Error('--api-cert and --api-key go together');
  const grpcPort = (f['grpc-port'] as number | undefined) ?? 8081;
  const seconds = (name: string): number | undefined => {
    const v = f[name] as number | undefined;
    if (v !== undefined && !(v >= 1 && v <= 3600)) throw new Error(`--${name} must be 1 to 3600 seconds`);
    return v === undefined ? undefined : v * 1000;
  };
  const [requestTimeoutMs, idleTimeoutMs] = [seconds('api-request-timeout'), seconds('api-idle-timeout')];
  const cp = await startControlPlane({
    stateDir,
    kekFile: f['kek-file'] as string | undefined,
    store: f.store as string | undefined,
    apiHost: f['api-host'] as string | undefined,
    apiPort: (f['api-port'] as number | undefined) ?? 8080,
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
  });
  writeFileSync(
    join(stateDir, 'control-plane.json'),
    JSON.stringify({ apiUrl: cp.apiUrl, grpcAddress: cp.grpcAddress, bootstrapAddress: cp.bootstrapAddress, metricsUrl: cp.metricsUrl ?? null, pid: process.pid }, null, 2),
  );
  onShutdown(() => cp.close());
}

export async function runDataplaneCommand(argv: string[]): Promise<void> {
  // A worker forked by the data plane's primary (docs/dataplane.md, "Workers").
  if (cluster.isWorker) {
    const { runDataplaneWorker } = await import('../dataplane/workers/worker.js');
    return runDataplaneWorker();
  }
  if (argv[0] === 'reload') return reloadDataplane(argv.slice(1));
  const f = parseFlagsWithConfig(argv, {
    id: 'string', region: 'string', 'control-plane': 'string', state: 'string', 'metrics-host': 'string', 'metrics-port': 'number',
    nofile: 'number', 'max-conns-per-client': 'number', 'max-conns-per-client-total': 'number', 'max-conns-per-nodebalancer': 'number',
    'fd-reserve': 'number', 'tcp-idle-timeout': 'number', 'endpoint-source': 'string',
    'client-ipv6-prefix': 'number', 'udp-new-sessions-per-client': 'number',
    join: 'string', 'insecure-grpc': 'boolean',
    'vrrp-interface': 'string', 'vrrp-peers': 'string', 'vrrp-priority': 'number', 'vrrp-router-id': 'number',
    workers: 'number', distribution: 'string', 'drain-time': 'number', 'wildcard-listeners': 'boolean', 'worker-apply-timeout': 'number',
  });
  const workers = (f.workers as number | undefined) ?? availableParallelism();
  if (!Number.isInteger(workers) || workers < 1 || workers > 1024) throw new Error('--workers must be an integer from 1 to 1024');
  const distribution = (f.distribution as string | undefined) ?? 'kernel';
  if (distribution !== 'rr' && distribution !== 'kernel') throw new Error('--distribution must be rr or kernel');
  const drainTime = f['drain-time'] as number | undefined;
  if (drainTime !== undefined && !(drainTime >= 0 && drainTime <= 86_400)) throw new Error('--drain-time must be 0 to 86400 seconds');
  const applyTimeout = f['worker-apply-timeout'] as number | undefined;
  if (applyTimeout !== undefined && !(applyTimeout >= 1 && applyTimeout <= 3600)) throw new Error('--worker-apply-timeout must be 1 to 3600 seconds');
  const { startDataplane } = await import('../dataplane/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  mkdirSync(stateDir, { recursive: true });
  const dp = await startDataplane({
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
    workerApplyTimeoutMs: applyTimeout === undefined ? undefined : applyTimeout * 1000,
    wildcardListeners: Boolean(f['wildcard-listeners']),
  });
  writeFileSync(join(stateDir, 'dataplane.json'), JSON.stringify({ pid: process.pid, metricsPort: dp.metricsPort ?? null, workers }, null, 2));
  onShutdown(() => dp.close());
  // A reload (new code, or a restart) that drops nothing: `fulcrum dataplane reload` sends SIGHUP.
  let reloading = false;
  const reload = (signal: string) => {
    if (reloading) return;
    reloading = true;
    process.stderr.write(`${signal}: reloading the data plane's workers\n`);
    dp.reload().then(
      () => process.stderr.write('reload: new workers serve, the old ones drain\n'),
      (err: Error) => process.stderr.write(`reload failed: ${err.message}\n`),
    ).finally(() => (reloading = false));
  };
  process.on('SIGHUP', () => reload('SIGHUP'));
  process.on('SIGUSR2', () => reload('SIGUSR2'));
}

/** `fulcrum dataplane reload --state DIR`: signals the data plane running from that folder. */
function reloadDataplane(argv: string[]): void {
  const f = parseFlags(argv, { state: 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const info = JSON.parse(readFileSync(join(stateDir, 'dataplane.json'), 'utf8')) as { pid?: number };
  if (typeof info.pid !== 'number') throw new Error(`no data plane pid in ${join(stateDir, 'dataplane.json')}`);
  process.kill(info.pid, 'SIGHUP');
  process.stdout.write(`sent SIGHUP to the data plane (pid ${info.pid})\n`);
}

/** Pair mode's flags (docs/multi-host.md); undefined without --vrrp-interface. */
function vrrpFlags(f: Record<string, unknown>) {
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
function hostFlags(f: Record<string, unknown>) {
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

/**
 * `--backup-store s3://BUCKET/PREFIX` and its companions (docs/install.md, "Backup store"): an
 * S3-compatible object store for backups and the binlog archive; absent, they stay in the state
 * folder. The keys come from a 0600 JSON file, never from the command line (`ps` shows it).
 */
async function backupStoreFlags(f: Record<string, unknown>) {
  const url = f['backup-store'] as string | undefined;
  const companions = ['backup-store-endpoint', 'backup-store-region', 'backup-store-path-style', 'backup-store-ca', 'backup-store-credentials',
    'backup-store-access-key-id', 'backup-store-secret-access-key'];
  if (url === undefined) {
    const stray = companions.find((k) => f[k] !== undefined);
    if (stray) throw new Error(`--${stray} needs --backup-store`);
    return undefined;
  }
  const { parseStoreUrl, loadStoreCredentials } = await import('../agent/backup/s3-store.js');
  const { bucket, prefix } = parseStoreUrl(url);
  const endpoint = f['backup-store-endpoint'] as string | undefined;
  if (endpoint !== undefined && !/^https:\/\/[^/?#\s]+\/?$/.test(endpoint)) throw new Error('--backup-store-endpoint must be https://HOST[:PORT] (the store is reached over TLS only)');
  const keyId = f['backup-store-access-key-id'] as string | undefined;
  const secret = f['backup-store-secret-access-key'] as string | undefined;
  const file = f['backup-store-credentials'] as string | undefined;
  if ((keyId === undefined) !== (secret === undefined)) throw new Error('--backup-store-access-key-id and --backup-store-secret-access-key go together');
  if (keyId !== undefined && file !== undefined) throw new Error('give the store\'s keys either in the config file or with --backup-store-credentials, not both');
  const credentials = keyId !== undefined && secret !== undefined
    ? { accessKeyId: keyId, secretAccessKey: secret }
    : loadStoreCredentials(required(file, 'backup-store-credentials'));
  const caFile = f['backup-store-ca'] as string | undefined;
  return {
    bucket, prefix, endpoint, credentials,
    region: (f['backup-store-region'] as string | undefined) ?? 'us-east-1',
    pathStyle: Boolean(f['backup-store-path-style']),
    ...(caFile !== undefined ? { ca: readFileSync(caFile, 'utf8') } : {}),
  };
}

export async function runAgentCommand(argv: string[]): Promise<void> {
  const f = parseFlagsWithConfig(argv, {
    id: 'string', region: 'string', 'control-plane': 'string', state: 'string', runtime: 'string',
    'metrics-host': 'string', 'metrics-port': 'number', 'stop-nodes-on-exit': 'boolean', join: 'string', 'insecure-grpc': 'boolean', engines: 'string',
    'node-pool': 'string', 'backup-store': 'string', 'backup-store-endpoint': 'string', 'backup-store-region': 'string',
    'backup-store-path-style': 'boolean', 'backup-store-ca': 'string', 'backup-store-credentials': 'string',
    'backup-store-access-key-id': 'string', 'backup-store-secret-access-key': 'string',
  });
  // The store's secret key only from a config file (which must then be 0600), never from the
  // command line, where `ps` shows it to every user of the host.
  if (argv.some((a) => a === '--backup-store-secret-access-key' || a.startsWith('--backup-store-secret-access-key='))) {
    throw new Error('--backup-store-secret-access-key is read from the --config file (mode 0600) or --backup-store-credentials, never from the command line');
  }
  const nodePool = f['node-pool'] as string | undefined;
  if (nodePool !== undefined && !parseCidr(nodePool)) throw new Error('--node-pool must be an IPv4 CIDR such as 198.18.110.0/28');
  const runtime = (f.runtime as string | undefined) ?? 'process';
  if (runtime !== 'process' && runtime !== 'docker') throw new Error('--runtime must be process or docker');
  const { startAgent } = await import('../agent/main.js');
  const stateDir = required(f.state as string | undefined, 'state');
  const agent = await startAgent({
    ...hostFlags(f),
    stateDir,
    runtime,
    enginesFile: f.engines as string | undefined,
    nodeAddressPool: nodePool,
    backupStore: await backupStoreFlags(f),
  });
  writeFileSync(join(stateDir, 'agent.json'), JSON.stringify({ pid: process.pid }, null, 2));
  onShutdown(() => agent.close({ stopNodes: Boolean(f['stop-nodes-on-exit']) }));
}

export async function runTokenCreate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', label: 'string', scopes: 'string', expiry: 'string', user: 'string', restricted: 'boolean', grants: 'string', 'kek-file': 'string', store: 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const { openStore } = await import('../control-plane/store/open.js');
  const { AuthService } = await import('../control-plane/domain/auth/auth-service.js');
  const { validateScopes } = await import('../control-plane/domain/auth/scopes.js');
  const { systemClock } = await import('../lib/clock.js');
  const store = await openStore(stateDir, { store: f.store as string | undefined, kekFile: f['kek-file'] as string | undefined });
  try {
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
  } finally {
    await store.close();
  }
}

/**
 * `fulcrum join-token create`: a one-time token for a new data plane or agent, made on the
 * control plane's host from its state folder (the same as POST /v4/fulcrum/join-tokens). The
 * token carries the bootstrap port, so the control plane must have started once.
 */
export async function runJoinTokenCreate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', role: 'string', id: 'string', region: 'string', 'expiry-seconds': 'number', 'kek-file': 'string', store: 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  let bootstrapPort = 0;
  try {
    const info = JSON.parse(readFileSync(join(stateDir, 'control-plane.json'), 'utf8')) as { bootstrapAddress?: string };
    bootstrapPort = Number(info.bootstrapAddress?.split(':').pop() ?? 0);
  } catch {
    // handled below
  }
  if (!bootstrapPort) throw new Error(`no running control plane found in ${stateDir} (control-plane.json): start it first, the token carries its bootstrap port`);
  const { openStore } = await import('../control-plane/store/open.js');
  const { FleetCa } = await import('../control-plane/domain/fleet/ca.js');
  const { FleetService } = await import('../control-plane/domain/fleet/fleet-service.js');
  const { RegionCatalogue } = await import('../control-plane/domain/regions.js');
  const { systemClock } = await import('../lib/clock.js');
  const store = await openStore(stateDir, { store: f.store as string | undefined, kekFile: f['kek-file'] as string | undefined });
  try {
    const fleet = new FleetService({ repo: store.fleet, ca: FleetCa.open(stateDir), regions: new RegionCatalogue(), clock: systemClock, bootstrapPort: () => bootstrapPort });
    const t = await fleet.createJoinToken({ role: f.role, id: f.id, region: f.region ?? '*', ...(f['expiry-seconds'] !== undefined ? { expiry_seconds: f['expiry-seconds'] } : {}) });
    process.stdout.write(`${t.token}\n`);
  } finally {
    await store.close();
  }
}

/**
 * `fulcrum store migrate`: brings the store's schema up to date (SQLite file or PostgreSQL) and
 * says which migrations it now has, so an operator can migrate before starting the replicas
 * (docs/install.md, "PostgreSQL"). Starting a control plane migrates too; this is the same work
 * on its own.
 */
export async function runStoreMigrate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', store: 'string', 'kek-file': 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const { openStore } = await import('../control-plane/store/open.js');
  const store = await openStore(stateDir, { store: f.store as string | undefined, kekFile: f['kek-file'] as string | undefined });
  try {
    const ids = await store.migrations();
    process.stdout.write(`${store.kind} store at migration ${ids.at(-1) ?? '(none)'} (${ids.length} applied)\n`);
  } finally {
    await store.close();
  }
}

/** `fulcrum kek rotate`: a new key-encryption key for the control plane's secrets (docs/security/secrets.md). */
export async function runKekRotate(argv: string[]): Promise<void> {
  const f = parseFlags(argv, { state: 'string', 'kek-file': 'string' });
  const stateDir = required(f.state as string | undefined, 'state');
  const { rotateKek } = await import('../control-plane/store/sqlite/database.js');
  const r = rotateKek(join(stateDir, 'control-plane.sqlite'), { kekFile: f['kek-file'] as string | undefined });
  process.stdout.write(`key ${r.keyId} now seals every secret (${r.resealed} re-sealed)\n`);
}
