import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { Gauge, type Registry } from 'prom-client';
import type { Logger } from '../lib/logger.js';
import type { Clock } from '../lib/clock.js';
import type { grpc } from '../lib/grpc.js';
import type { Db } from './store/sqlite/database.js';
import type { Router } from './api/router.js';
import type { AuthService } from './domain/auth/auth-service.js';
import type { UserService } from './domain/auth/user-service.js';
import type { EventService } from './domain/events/event-service.js';
import type { RegionCatalogue } from './domain/regions.js';
import type { AddressRepository, KeyValueRepository } from './store/ports.js';
import { sqliteDatabaseRepository } from './store/sqlite/database-repository.js';
import { EngineCatalogue, detectLocalEngines, parseEngineId, watchedEngines, type EngineEntry } from './domain/databases/catalogue.js';
import { DatabaseService } from './domain/databases/database-service.js';
import { DatabaseObserver } from './domain/databases/observer.js';
import { AgentPushServer } from './push/agent-server.js';
import { databaseRoutes } from './api/routes/databases.js';

/** What the composition root hands to each product area when wiring it in. */
export interface ControlPlaneContext {
  db: Db;
  router: Router;
  app: FastifyInstance;
  grpcServer: grpc.Server;
  auth: AuthService;
  /** Account users and grants; product areas register the entities grants may name. */
  users: UserService;
  events: EventService;
  regions: RegionCatalogue;
  addresses: AddressRepository;
  kv: KeyValueRepository;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  stateDir: string;
  /** IPv4 pool for database endpoints, e.g. 127.78.0.0/16. */
  databasePool: string;
  hostnameSuffix: string;
  /** Run in reverse order on close. */
  closers: (() => Promise<void> | void)[];
  /** Set by registerExtensions: the Managed Databases parts, for tests and operators. */
  databases?: { service: DatabaseService; engines: EngineCatalogue; agents: AgentPushServer };
}

/**
 * Product areas beyond NodeBalancers (Managed Databases) wire themselves in here, so the
 * composition root does not grow with every area. Each registers routes on `router`, services
 * on `grpcServer`, and its own closers.
 */
export async function registerExtensions(ctx: ControlPlaneContext): Promise<void> {
  const repo = sqliteDatabaseRepository(ctx.db);
  // Engine catalogue: the operator's file wins; else what agents report plus the local servers.
  const configured = watchedEngines(join(ctx.stateDir, 'database-engines.json'));
  const detected = await detectLocalEngines();
  const reported = (): EngineEntry[] =>
    repo.agents().flatMap((a) => a.engines)
      .filter((e) => parseEngineId(e.id))
      .map((e) => ({ id: e.id, engine: 'mysql' as const, version: parseEngineId(e.id)!.version, image: e.image, binary: e.binary }));
  const engines = new EngineCatalogue(configured, detected, reported);

  const push: { server?: AgentPushServer } = {};
  const service = new DatabaseService({
    repo, addresses: ctx.addresses, auth: ctx.auth, events: ctx.events, regions: ctx.regions, engines, clock: ctx.clock,
    pool: ctx.databasePool, onChange: () => push.server?.notifyChanged(),
  });
  const observer = new DatabaseObserver({ repo, events: ctx.events, service, clock: ctx.clock, logger: ctx.logger });
  const agents = new AgentPushServer({ repo, kv: ctx.kv, observer, clock: ctx.clock, logger: ctx.logger, registry: ctx.registry });
  push.server = agents;
  agents.register(ctx.grpcServer);
  ctx.closers.push(() => agents.close());

  // Catalogue changes (a new image or binary for an engine id) become pending patches.
  const retarget = setInterval(() => {
    try {
      if (service.retargetEngines()) agents.notifyChanged();
    } catch (err) {
      ctx.logger.error({ err }, 'engine retargeting failed');
    }
  }, 2000);
  retarget.unref();
  ctx.closers.push(() => clearInterval(retarget));

  // Databases by status, read from the store at scrape time (bounded label set).
  new Gauge({
    name: 'fulcrum_databases',
    help: 'Managed databases by API status',
    labelNames: ['status'],
    registers: [ctx.registry],
    collect() {
      this.reset();
      for (const d of repo.list()) if (!d.deleting) this.inc({ status: d.status });
    },
  });

  // Grants can name databases (and are checked against the ones that exist), like NodeBalancers.
  ctx.users.registerEntities('database', () => repo.list().filter((d) => !d.deleting).map((d) => ({ id: d.id, label: d.label })));
  databaseRoutes(ctx.router, { service, engines });
  // Agent status (connected, region, runtime, engines, applied version), for operators and tests.
  ctx.router.get('/fulcrum/agents', 'databases:read_only', () => ({ data: agents.connectedAgents() }));
  ctx.databases = { service, engines, agents };
}
