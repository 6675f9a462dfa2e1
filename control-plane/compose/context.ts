import type { AddressPools } from '../domain/address-pools.js';
import type { Registry } from 'prom-client';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import type { grpc } from '../../lib/grpc.js';
import type { Db } from '../store/sqlite/database.js';
import type { Store } from '../store/store.js';
import type { AccountService } from '../domain/account/account-service.js';
import type { AddressRepository, KeyValueRepository } from '../store/ports.js';
import type { Router } from '../api/router.js';
import type { AuthService } from '../domain/auth/auth-service.js';
import type { UserService } from '../domain/auth/user-service.js';
import type { EventService } from '../domain/events/event-service.js';
import type { RegionCatalogue } from '../domain/regions.js';
import type { BackendNetworks } from '../domain/nodebalancers/backend-networks.js';
import type { FleetService } from '../domain/fleet/fleet-service.js';
import type { PeerAuth } from '../push/peer-auth.js';
import type { PeerStreams } from '../push/peer-streams.js';
import type { Replicas } from '../store/replicas.js';

/**
 * What main.ts builds once and hands to each product area (compose/nodebalancers.ts,
 * compose/databases.ts) when wiring it in: the store, the shared services, the HTTP router and
 * gRPC server to register on, and the closers to run on shutdown.
 */
export interface ControlPlaneContext {
  /** Every repository, over SQLite or PostgreSQL. */
  store: Store;
  /** The SQLite connection when the store is SQLite (tests read rows through it). */
  db?: Db;
  router: Router;
  grpcServer: grpc.Server;
  auth: AuthService;
  /** Account users and grants; product areas register the entities grants may name. */
  users: UserService;
  /** Profile, account, notifications, tags; product areas register capabilities, tagged entities and notices. */
  account: AccountService;
  events: EventService;
  regions: RegionCatalogue;
  addresses: AddressRepository;
  kv: KeyValueRepository;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  stateDir: string;
  /** IPv4 pools for NodeBalancer addresses per region, e.g. 127.77.0.0/16 for all. */
  nodebalancerPool: AddressPools;
  /** IPv6 range of NodeBalancers' `ipv6` (parsed by main.ts), if any. */
  nodebalancerIpv6Pool?: string;
  /** IPv4 pools for database endpoints per region, e.g. 127.78.0.0/16 for all. */
  databasePool: AddressPools;
  hostnameSuffix: string;
  /** Where node addresses may point: the operator's backend networks minus Fulcrum's own services. */
  backends: BackendNetworks;
  /** The fleet PKI (join, renew, revoke); each area closes the streams of hosts it revokes. */
  fleet: FleetService;
  /** How push streams learn who their peer is (the client certificate; nobody when insecure). */
  peers: PeerAuth;
  /** Every host stream this replica holds, closed when its host is removed (push/peer-streams.ts). */
  hostStreams: PeerStreams;
  /**
   * The other replicas on the same store: tell them of committed writes, hear of theirs, and ask
   * whether this replica holds the lease for once-only background work (always, on SQLite).
   */
  replicas: Replicas;
  /** How often the lease holder checks which auto backups are due (compose/databases.ts). */
  backupScheduleMs?: number;
  /** --host-lost-after: an agent host without a stream this long is declared lost (off when undefined). */
  hostLostAfterMs?: number;
  /** Run in reverse order on close. */
  closers: (() => Promise<void> | void)[];
}

/**
 * Runs `fn` every `ms`; a run still going when the next is due makes that one skip, so slow
 * store answers never pile runs up.
 */
export function every(ctx: Pick<ControlPlaneContext, 'clock' | 'logger'>, ms: number, failure: string, fn: () => Promise<void>): { cancel(): void } {
  let running = false;
  return ctx.clock.setInterval(() => {
    if (running) return;
    running = true;
    fn().catch((err) => ctx.logger.error({ err }, failure)).finally(() => {
      running = false;
    });
  }, ms);
}
