import type { AddressRepository, DataplaneRepository, EventRepository, KeyValueRepository, ReplicaRepository, TokenRepository, UserRepository } from './ports.js';
import type { NodeBalancerRepository } from './nodebalancer-repository.js';
import type { DatabaseRepository } from './database-repository.js';
import type { FleetRepository } from './fleet-repository.js';
import type { OAuthRepository } from './oauth-repository.js';

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

/**
 * A port whose methods return plain values: how the embedded adapter writes its repositories
 * before store/sqlite/gate.ts makes them the asynchronous port.
 */
export type Immediate<T> = {
  [K in keyof T]: T[K] extends (...a: infer A) => Promise<infer R> ? (...a: A) => R : T[K];
};
