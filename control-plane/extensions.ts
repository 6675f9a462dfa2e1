import type { FastifyInstance } from 'fastify';
import type { Registry } from 'prom-client';
import type { Logger } from '../lib/logger.js';
import type { Clock } from '../lib/clock.js';
import type { grpc } from '../lib/grpc.js';
import type { Db } from './store/sqlite/database.js';
import type { Router } from './api/router.js';
import type { AuthService } from './domain/auth/auth-service.js';
import type { EventService } from './domain/events/event-service.js';
import type { RegionCatalogue } from './domain/regions.js';
import type { AddressRepository, KeyValueRepository } from './store/ports.js';

/** What the composition root hands to each product area when wiring it in. */
export interface ControlPlaneContext {
  db: Db;
  router: Router;
  app: FastifyInstance;
  grpcServer: grpc.Server;
  auth: AuthService;
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
}

/**
 * Product areas beyond NodeBalancers (Managed Databases) wire themselves in here, so the
 * composition root does not grow with every area. Each registers routes on `router`, services
 * on `grpcServer`, and its own closers.
 */
export async function registerExtensions(_ctx: ControlPlaneContext): Promise<void> {
  // Managed Databases registers here (control-plane/domain/databases).
}
