import type { AddressRepository, KeyValueRepository, ReplicaRepository } from './ports.js';
import type { TokenRepository, UserRepository } from './auth/repository.js';
import type { EventRepository } from './events/repository.js';
import type { DataplaneRepository, NodeBalancerRepository } from './nodebalancers/repository.js';
import type { DatabaseRepository } from './databases/repository.js';
import type { FleetRepository } from './fleet/repository.js';
import type { OAuthRepository } from './auth/oauth-repository.js';

/**
 * One opened store with every repository over it (store/sqlite or store/postgres). The
 * repositories share the store's transactions: a `transaction` begun on one of them covers writes
 * made through the others (ports.ts).
 */
export interface Store {
  readonly kind: 'sqlite' | 'postgres';
  users: UserRepository;
  tokens: TokenRepository;
  events: EventRepository;
  addresses: AddressRepository;
  dataplanes: DataplaneRepository;
  kv: KeyValueRepository;
  nodebalancers: NodeBalancerRepository;
  databases: DatabaseRepository;
  fleet: FleetRepository;
  /** The OAuth login's clients, codes and issued tokens. */
  oauth: OAuthRepository;
  /** Heartbeats of the control-plane replicas on this store. */
  replicaBeats: ReplicaRepository;
  /** The ids of the schema migrations applied, in order. */
  migrations(): Promise<string[]>;
  close(): Promise<void>;
}
