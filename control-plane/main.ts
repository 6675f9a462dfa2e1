import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Registry } from 'prom-client';
import { createLogger, type Logger } from '../lib/logger.js';
import { createRegistry } from '../lib/metrics.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { grpc, serverOptions } from '../lib/grpc.js';
import { openDatabase } from './store/sqlite/database.js';
import { makePrivate, restrictUmask } from '../lib/private-files.js';
import { sqliteAddresses, sqliteEvents, sqliteKeyValue, sqliteTokens, sqliteUsers } from './store/sqlite/core-repositories.js';
import { AuthService } from './domain/auth/auth-service.js';
import { UserService } from './domain/auth/user-service.js';
import { EventService } from './domain/events/event-service.js';
import { RegionCatalogue, type Region } from './domain/regions.js';
import { createHttpServer } from './api/server.js';
import { Router } from './api/router.js';
import { accountRoutes } from './api/routes/account.js';
import { userRoutes } from './api/routes/users.js';
import type { ControlPlaneContext } from './compose/context.js';
import { composeNodeBalancers } from './compose/nodebalancers.js';
import { composeDatabases } from './compose/databases.js';

export interface ControlPlaneOptions {
  stateDir: string;
  /** Key-encryption key file for secrets in the store (default `<stateDir>/keys/kek`, docs/security/secrets.md). */
  kekFile?: string;
  apiHost?: string;
  apiPort?: number; // 0 = random
  grpcHost?: string;
  grpcPort?: number; // 0 = random
  nodebalancerPool?: string;
  databasePool?: string;
  hostnameSuffix?: string;
  regions?: Region[];
  logger?: Logger;
  registry?: Registry;
  clock?: Clock;
}

export interface ControlPlane {
  apiUrl: string;
  /** The bootstrap admin token (full scopes), kept in <stateDir>/admin-token with mode 0600. */
  adminToken: string;
  grpcAddress: string;
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
  // Private state: umask 077 and the folder made 0700/0600 again (docs/security/secrets.md).
  restrictUmask();
  makePrivate(opts.stateDir);
  const logger = opts.logger ?? createLogger('control-plane');
  const registry = opts.registry ?? createRegistry('control-plane');
  const clock = opts.clock ?? systemClock;
  const db = openDatabase(join(opts.stateDir, 'control-plane.sqlite'), { kekFile: opts.kekFile });

  // The account: users, tokens, events, regions; the HTTP router and the gRPC server.
  const users = sqliteUsers(db);
  const auth = new AuthService(users, sqliteTokens(db), clock);
  const userService = new UserService(users, auth);
  const events = new EventService(sqliteEvents(db), clock);
  const regions = new RegionCatalogue(opts.regions);
  const app = createHttpServer(logger);
  const router = new Router(app, auth);
  accountRoutes(router, { auth, events, regions });
  userRoutes(router, { users: userService, auth });
  app.get('/metrics', async (_req, reply) => {
    reply.header('content-type', registry.contentType);
    return reply.send(await registry.metrics());
  });
  const grpcServer = new grpc.Server(serverOptions);

  // The product areas, each wiring its store, services, routes and push streams.
  const context: ControlPlaneContext = {
    db, router, grpcServer, auth, users: userService, events, regions, addresses: sqliteAddresses(db), kv: sqliteKeyValue(db),
    clock, logger, registry, stateDir: opts.stateDir,
    nodebalancerPool: opts.nodebalancerPool ?? '127.77.0.0/16',
    databasePool: opts.databasePool ?? '127.78.0.0/16',
    hostnameSuffix: opts.hostnameSuffix ?? '.ip.linodeusercontent.com',
    closers: [],
  };
  composeNodeBalancers(context);
  await composeDatabases(context);

  const grpcPort = await new Promise<number>((resolve, reject) =>
    grpcServer.bindAsync(`${opts.grpcHost ?? '127.0.0.1'}:${opts.grpcPort ?? 0}`, grpc.ServerCredentials.createInsecure(), (err, port) =>
      err ? reject(err) : resolve(port),
    ),
  );
  const apiHost = opts.apiHost ?? '127.0.0.1';
  await app.listen({ host: apiHost, port: opts.apiPort ?? 0 });
  const address = app.server.address();
  const apiPort = typeof address === 'object' && address ? address.port : 0;
  const apiUrl = `http://${apiHost}:${apiPort}`;
  logger.info({ apiUrl, grpc: `${opts.grpcHost ?? '127.0.0.1'}:${grpcPort}` }, 'control plane ready');

  const adminToken = bootstrapAdmin(auth, opts.stateDir, users.count() === 0);

  return {
    apiUrl,
    adminToken,
    grpcAddress: `${opts.grpcHost ?? '127.0.0.1'}:${grpcPort}`,
    context,
    async close() {
      for (const c of context.closers.reverse()) await c();
      await new Promise<void>((resolve) => grpcServer.tryShutdown(() => resolve()));
      await app.close();
      db.close();
    },
  };
}

/**
 * On first start, creates the unrestricted `admin` user and a token with all scopes, and keeps
 * the secret in the state folder (mode 0600) so later starts and scripts can read it back.
 */
function bootstrapAdmin(auth: AuthService, stateDir: string, fresh: boolean): string {
  const file = join(stateDir, 'admin-token');
  if (!fresh && existsSync(file)) return readFileSync(file, 'utf8').trim();
  const admin = auth.ensureAdmin();
  const { secret } = auth.issueToken(admin.id, { label: 'fulcrum-bootstrap', scopes: '*', expiry: null });
  writeFileSync(file, `${secret}\n`, { mode: 0o600 });
  chmodSync(file, 0o600);
  return secret;
}
