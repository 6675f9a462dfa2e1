import { parseIpv6Cidr } from '../lib/ipv6.js';
import { defaultApiListenerLimits, defaultBootstrapListenerLimits, isLoopbackHost, type ListenerLimits } from '../lib/listener-limits.js';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { Counter, type Registry } from 'prom-client';
import { createLogger, type Logger } from '../lib/logger.js';
import { createRegistry, serveMetrics } from '../lib/metrics.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { grpc, serverOptions } from '../lib/grpc.js';
import { openStore } from './store/open.js';
import { singleReplica } from './store/replicas.js';
import { pgReplicas } from './store/postgres/replicas.js';
import { makePrivate, restrictUmask } from '../lib/private-files.js';
import { AuthService } from './domain/auth/auth-service.js';
import { UserService } from './domain/auth/user-service.js';
import { EventService, type EventRetention } from './domain/events/event-service.js';
import { RegionCatalogue, type Region } from './domain/regions.js';
import { createHttpServer } from './api/server.js';
import { Router } from './api/router.js';
import { RateLimiter, type RateLimitSettings } from './api/rate-limit.js';
import { BackendNetworks } from './domain/nodebalancers/backend-networks.js';
import { AddressPools, assertDisjoint } from './domain/address-pools.js';
import { accountRoutes } from './api/routes/account.js';
import { userRoutes } from './api/routes/users.js';
import { profileRoutes } from './api/routes/profile.js';
import { AccountService } from './domain/account/account-service.js';
import { every, type ControlPlaneContext } from './compose/context.js';
import { composeNodeBalancers } from './compose/nodebalancers.js';
import { composeDatabases } from './compose/databases.js';
import { FleetCa } from './domain/fleet/ca.js';
import { FleetService, REVOCATION_RECHECK_MS } from './domain/fleet/fleet-service.js';
import { certificatePeers, insecurePeers } from './push/peer-auth.js';
import { PeerStreams } from './push/peer-streams.js';
import { startBootstrapServer } from './push/bootstrap-server.js';
import { fleetRoutes } from './api/routes/fleet.js';
import { consoleRoutes, defaultConsoleDir } from './api/console.js';
import { OAuthService } from './domain/auth/oauth-service.js';
import { oauthClientRoutes } from './api/routes/oauth-clients.js';
import { loginRoutes } from './api/login.js';

export interface ControlPlaneOptions {
  stateDir: string;
  /** Key-encryption key file for secrets in the store (default `<stateDir>/keys/kek`, docs/security/secrets.md). */
  kekFile?: string;
  /** `sqlite` (the default: `<stateDir>/control-plane.sqlite`) or a postgres:// URL (docs/install.md). */
  store?: string;
  /** How long and how many account events are kept (default 90 days, 10,000 events; docs/api.md). */
  eventRetention?: Partial<EventRetention>;
  apiHost?: string;
  apiPort?: number; // 0 = random
  /**
   * Plain HTTP on an API address other than loopback (a TLS proxy in front): refused without
   * this, the operator's explicit --api-insecure-listen, when there is no certificate.
   */
  apiInsecureListen?: boolean;
  /** Request and idle timeouts and connection caps of the API listener; left out: the defaults (lib/listener-limits.ts). */
  apiListener?: Partial<ListenerLimits>;
  /** The same for the bootstrap listener (its timeouts are the API's unless given). */
  bootstrapListener?: Partial<ListenerLimits>;
  /** Bootstrap requests per minute per client address (default 120, 0 = none). */
  bootstrapRateLimit?: number;
  grpcHost?: string;
  grpcPort?: number; // 0 = random
  /** How long a stop waits for hosts' gRPC connections to close before cutting them (default 5 s). */
  grpcDrainMs?: number;
  nodebalancerPool?: string;
  /** IPv6 range (`fd00:1::/64`) of NodeBalancers' `ipv6`, every region; none: `ipv6` is null. */
  nodebalancerIpv6Pool?: string;
  databasePool?: string;
  hostnameSuffix?: string;
  /** PEM certificate (chain) and key: the API is served over HTTPS only (docs/security/api.md). */
  apiTls?: { cert: string; key: string };
  /** Per-token and per-address API limits; fields left out keep the defaults (api/rate-limit.ts). */
  rateLimits?: Partial<RateLimitSettings>;
  /** GET /metrics on its own listener (default host 127.0.0.1, port 0 = random); no port = none. */
  metricsHost?: string;
  metricsPort?: number;
  /** Networks node addresses may be in (default: all but the special ranges), and ones never allowed. */
  backendNetworks?: string[];
  backendExcluded?: string[];
  regions?: Region[];
  /**
   * Plain gRPC without client certificates: every peer's claimed id is believed. Only with the
   * operator's explicit --insecure-grpc (docs/security/grpc.md); mutual TLS otherwise.
   */
  insecureGrpc?: boolean;
  /** The bootstrap (join and renewal) HTTPS endpoint; host defaults to grpcHost, port 0 = random. */
  bootstrapPort?: number;
  /** Lifetime of data-plane and agent certificates (default 30 days). */
  certLifetimeMs?: number;
  /** The built web console served at /console (default: the build's dist/console, docs/console.md). */
  consoleDir?: string;
  logger?: Logger;
  registry?: Registry;
  clock?: Clock;
  /** How often the lease holder checks which auto backups are due (default 30 s; tests shorten it). */
  backupScheduleMs?: number;
  /**
   * Declare an agent host lost after this long without a stream (--host-lost-after); off by
   * default (docs/multi-host.md, "A lost host", says the risk).
   */
  hostLostAfterMs?: number;
}

export interface ControlPlane {
  apiUrl: string;
  /** The bootstrap admin token (full scopes), kept in <stateDir>/admin-token with mode 0600. */
  adminToken: string;
  grpcAddress: string;
  /** http://host:port/metrics of the metrics listener, when there is one. */
  metricsUrl?: string;
  /** host:port of the bootstrap endpoint (its port is also written into every join token). */
  bootstrapAddress: string;
  context: ControlPlaneContext;
  close(): Promise<void>;
}

/**
 * The control plane's composition root: opens the store, builds what every product area shares
 * (account, events, regions, the HTTP router, the gRPC server), lets each area wire itself in
 * (compose/nodebalancers.ts, compose/databases.ts), then serves the REST API (fastify) and the
 * gRPC push services. Only main.ts and compose/ construct dependencies.
 */
export async function startControlPlane(opts: ControlPlaneOptions): Promise<ControlPlane> {
  // Settings first: a bad pool stops the start before anything is opened or listens.
  const nodebalancerPool = AddressPools.parse(opts.nodebalancerPool ?? '127.77.0.0/16', 'NodeBalancer');
  const databasePool = AddressPools.parse(opts.databasePool ?? '127.78.0.0/16', 'database endpoint');
  const servicePools = [...nodebalancerPool.cidrs(), ...databasePool.cidrs()];
  assertDisjoint(servicePools, 'NodeBalancer and database endpoint');
  const ipv6Pool = opts.nodebalancerIpv6Pool?.trim() || undefined;
  if (ipv6Pool !== undefined && (parseIpv6Cidr(ipv6Pool)?.prefix ?? 0) < 64) {
    throw new Error(`NodeBalancer IPv6 pool ${JSON.stringify(ipv6Pool)}: expected an IPv6 range on its boundary, /64 to /128 (fd00:1::/64)`);
  }
  const apiHost = opts.apiHost ?? '127.0.0.1';
  if (!opts.apiTls && !opts.apiInsecureListen && !isLoopbackHost(apiHost)) {
    throw new Error(`--api-host ${apiHost} is not a loopback address and the API has no certificate: tokens and passwords would cross the network in clear. `
      + 'Give --api-cert FILE and --api-key FILE (HTTPS), or --api-insecure-listen to serve plain HTTP there anyway (behind a proxy that terminates TLS)');
  }
  // One client is one key for every limit of the API (--client-ipv6-prefix): the connection caps
  // count an IPv6 client by the same prefix as the per-address rate limit.
  const clientIpv6Prefix = opts.rateLimits?.ipv6Prefix;
  const apiListener = withDefaults({ ...defaultApiListenerLimits, clientIpv6Prefix }, opts.apiListener);
  const bootstrapListener = withDefaults(
    { ...defaultBootstrapListenerLimits, requestTimeoutMs: apiListener.requestTimeoutMs, idleTimeoutMs: apiListener.idleTimeoutMs, clientIpv6Prefix },
    opts.bootstrapListener,
  );
  // Private state: umask 077 and the folder made 0700/0600 again (docs/security/secrets.md).
  restrictUmask();
  makePrivate(opts.stateDir);
  const logger = opts.logger ?? createLogger('control-plane');
  const registry = opts.registry ?? createRegistry('control-plane');
  const clock = opts.clock ?? systemClock;
  const store = await openStore(opts.stateDir, { store: opts.store, kekFile: opts.kekFile });
  // Several replicas share a PostgreSQL store; a SQLite store has one process (docs/architecture.md, "The store").
  const replicas = store.kind === 'postgres' && opts.store ? pgReplicas(opts.store, { clock, logger, beats: store.replicaBeats }) : singleReplica();

  // The account: users, tokens, events, regions; the HTTP router and the gRPC server.
  const users = store.users;
  const auth = new AuthService(users, store.tokens, clock);
  const userService = new UserService(users, auth);
  const account = new AccountService(users, auth, store.kv);
  const events = new EventService(store.events, clock, { retention: opts.eventRetention, logger: logger.child({ component: 'events' }) });
  const regions = new RegionCatalogue(opts.regions);
  const limiter = new RateLimiter(clock, registry, opts.rateLimits);
  const refused = new Counter({
    name: 'fulcrum_listener_refused_total',
    help: 'Connections closed at accept by a cap (per_address, total) and bootstrap requests refused by its rate limit (rate)',
    labelNames: ['listener', 'reason'] as const,
    registers: [registry],
  });
  const app = createHttpServer(logger, {
    tls: opts.apiTls, limiter, listener: apiListener,
    connectionRefused: (cap) => refused.inc({ listener: 'api', reason: refusalLabel[cap] }),
  });
  const router = new Router(app, auth, limiter);
  accountRoutes(router, { auth, events, regions });
  userRoutes(router, { users: userService, auth });
  profileRoutes(router, { account, regions });
  consoleRoutes(app, opts.consoleDir ?? defaultConsoleDir());
  // The OAuth 2 login on the API's own listener (docs/security/api.md, "OAuth login").
  const oauth = new OAuthService(store.oauth, auth, clock);
  oauthClientRoutes(router, { oauth });
  loginRoutes(app, { oauth, secure: Boolean(opts.apiTls) });
  const grpcServer = new grpc.Server(serverOptions);

  // The fleet PKI: the control plane's CA, join tokens, revocation (docs/security/grpc.md).
  const grpcHost = opts.grpcHost ?? '127.0.0.1';
  const ca = FleetCa.open(opts.stateDir);
  const serverPair = ca.serverPair();
  let bootstrapPort = 0;
  const fleet = new FleetService({
    repo: store.fleet, ca, regions, clock, bootstrapPort: () => bootstrapPort, certLifetimeMs: opts.certLifetimeMs,
    announceRemoval: (role, id) => replicas.publishRemoval(role, id),
  });
  // A removed host's streams end on every replica (docs/security/grpc.md, "Revocation"): at once
  // here, on the others when they hear of it, and at the latest at a replica's next re-check.
  const hostStreams = new PeerStreams();
  fleet.onRevoke((role, id) => {
    const n = hostStreams.kickHost(role, id);
    if (n > 0) logger.info({ role, id, streams: n }, 'streams of a removed host closed');
  });
  replicas.onChange((c) => {
    if (c.kind === 'removed' && c.host) void fleet.heardRemoval(c.host.role, c.host.id).catch((err) => logger.error({ err }, 'removal heard from another replica could not be applied'));
  });
  const recheck = every({ clock, logger }, REVOCATION_RECHECK_MS, 'open streams could not be re-checked', async () => {
    const n = await hostStreams.recheck(fleet);
    if (n > 0) logger.info({ streams: n }, 'streams whose certificate is no longer valid closed');
  });
  const bootstrap = await startBootstrapServer({
    fleet, serverPair, host: grpcHost, port: opts.bootstrapPort ?? 0, logger, clock,
    limits: bootstrapListener, rateLimit: opts.bootstrapRateLimit,
    refused: (what) => refused.inc({ listener: 'bootstrap', reason: refusalLabel[what] }),
  });
  bootstrapPort = bootstrap.port;
  fleetRoutes(router, { fleet, auth });
  if (!opts.apiTls && !isLoopbackHost(apiHost)) logger.warn({ apiHost }, 'API in plain HTTP on a non-loopback address (--api-insecure-listen): only behind a proxy that terminates TLS');
  if (opts.insecureGrpc) logger.warn('gRPC without TLS (--insecure-grpc): any host that reaches the port can claim any data plane or agent');

  // The product areas, each wiring its store, services, routes and push streams.
  const backends = new BackendNetworks({ allowed: opts.backendNetworks, excluded: opts.backendExcluded, servicePools });
  const context: ControlPlaneContext = {
    store, db: 'db' in store ? (store.db as ControlPlaneContext['db']) : undefined, router, grpcServer, auth, users: userService, account, events, regions, addresses: store.addresses, kv: store.kv,
    clock, logger, registry, stateDir: opts.stateDir, nodebalancerPool, nodebalancerIpv6Pool: ipv6Pool, databasePool, backends,
    fleet, peers: opts.insecureGrpc ? insecurePeers : certificatePeers(fleet), hostStreams,
    hostnameSuffix: opts.hostnameSuffix ?? '.ip.linodeusercontent.com',
    replicas,
    backupScheduleMs: opts.backupScheduleMs,
    hostLostAfterMs: opts.hostLostAfterMs,
    // Run last: the lease and the change listener go once the push servers and ticks have stopped.
    closers: [() => replicas.close(), () => recheck.cancel()],
  };
  const configPush = await composeNodeBalancers(context);
  await composeDatabases(context, configPush);

  // Mutual TLS: the handshake itself refuses a client without a certificate from the fleet CA.
  const credentials = opts.insecureGrpc
    ? grpc.ServerCredentials.createInsecure()
    : grpc.ServerCredentials.createSsl(Buffer.from(ca.caPem), [{ private_key: Buffer.from(serverPair.keyPem), cert_chain: Buffer.from(serverPair.certPem) }], true);
  const grpcPort = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync(`${grpcHost}:${opts.grpcPort ?? 0}`, credentials, (err, port) => (err ? reject(err) : resolve(port))),
  );
  await app.listen({ host: apiHost, port: opts.apiPort ?? 0 });
  const address = app.server.address();
  const apiPort = typeof address === 'object' && address ? address.port : 0;
  const apiUrl = `${opts.apiTls ? 'https' : 'http'}://${apiHost}:${apiPort}`;
  // Metrics name data planes and agents: on their own listener, loopback unless told otherwise.
  const metricsHost = opts.metricsHost ?? '127.0.0.1';
  const metricsServer = opts.metricsPort === undefined ? undefined : await serveMetrics(registry, metricsHost, opts.metricsPort);
  const metricsAddr = metricsServer?.address();
  const metricsUrl = metricsAddr && typeof metricsAddr === 'object' ? `http://${metricsHost}:${metricsAddr.port}/metrics` : undefined;
  backends.refuseListener(apiHost, apiPort);
  backends.refuseListener(grpcHost, grpcPort);
  backends.refuseListener(grpcHost, bootstrapPort);
  if (metricsAddr && typeof metricsAddr === 'object') backends.refuseListener(metricsHost, metricsAddr.port);
  logger.info({ apiUrl, grpc: `${grpcHost}:${grpcPort}`, bootstrap: `${grpcHost}:${bootstrapPort}`, mtls: !opts.insecureGrpc, metricsUrl }, 'control plane ready');

  const adminToken = await bootstrapAdmin(auth, opts.stateDir, (await users.count()) === 0);

  return {
    apiUrl,
    adminToken,
    grpcAddress: `${grpcHost}:${grpcPort}`,
    bootstrapAddress: `${grpcHost}:${bootstrapPort}`,
    metricsUrl,
    context,
    async close() {
      const drainMs = opts.grpcDrainMs ?? 5_000;
      for (const c of context.closers.reverse()) await c();
      // Our streams are ended by the closers above; a connection a host (hung, or hostile) keeps
      // open past the drain time is cut, so a stop never waits on a peer.
      await new Promise<void>((resolve) => {
        const cut = setTimeout(() => {
          logger.warn({ drainMs }, 'gRPC connections still open after the drain time; closing them');
          grpcServer.forceShutdown();
          resolve();
        }, drainMs);
        grpcServer.tryShutdown(() => {
          clearTimeout(cut);
          resolve();
        });
      });
      bootstrap.server.closeAllConnections();
      await new Promise<void>((resolve) => bootstrap.server.close(() => resolve()));
      await app.close();
      if (metricsServer) await new Promise<void>((resolve) => metricsServer.close(() => resolve()));
      await store.close();
    },
  };
}

/** The `reason` label of fulcrum_listener_refused_total for each refusal. */
const refusalLabel = { per_key: 'per_address', total: 'total', rate: 'rate' } as const;

/** The defaults with the fields that were given (an undefined field keeps its default). */
function withDefaults(defaults: ListenerLimits, given: Partial<ListenerLimits> | undefined): ListenerLimits {
  const out = { ...defaults };
  for (const [k, v] of Object.entries(given ?? {}) as [keyof ListenerLimits, number | undefined][]) if (v !== undefined) out[k] = v;
  return out;
}

/**
 * On first start, creates the unrestricted `admin` user and a token with all scopes, and keeps
 * the secret in the state folder (mode 0600) so later starts and scripts can read it back.
 */
async function bootstrapAdmin(auth: AuthService, stateDir: string, fresh: boolean): Promise<string> {
  const file = join(stateDir, 'admin-token');
  if (!fresh && existsSync(file)) return readFileSync(file, 'utf8').trim();
  const admin = await auth.ensureAdmin();
  const { secret } = await auth.issueToken(admin.id, { label: 'fulcrum-bootstrap', scopes: '*', expiry: null });
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return secret;
}
