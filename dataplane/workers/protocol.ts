import type { NodeBalancerSpec } from '../config/model.js';
import type { PreparedSnapshot } from '../config/validate-delta.js';
import type { CounterDelta } from '../telemetry/telemetry-source.js';

/**
 * The messages between a data plane's primary and its workers (docs/dataplane.md, "Workers"),
 * over node:cluster's IPC channel. A snapshot travels validated (the primary's `prepare`), its
 * NodeBalancers in parts and then the rest of it in `commit`, which the worker hands to the
 * engine's `commitPrepared`: the one swap a single-process data plane uses too.
 */
export interface NodeVerdict {
  configId: number;
  nodeId: number;
  status: 'UP' | 'DOWN';
}

/** Asked at accept when the NodeBalancer is throttled or the config's `table` has no entry for the client here. */
export interface AdmitRequest {
  t: 'admit';
  id: number;
  nb: number;
  /** client_conn_throttle as this worker's snapshot has it (0 = off). */
  limit: number;
  /** The client's address: what `table` stickiness pins. */
  ip: string;
  /** Its client key (lib/client-key.ts): what the throttle counts. */
  key: string;
  /** `table` stickiness: the config and the node this worker would pick. */
  config?: number;
  node?: number;
}

export interface AdmitAnswer {
  t: 'admitted';
  id: number;
  ok: boolean;
  /** The client's node in the shared table, and when that entry was made. */
  node?: number;
  added?: number;
}

export type ToWorker =
  | { t: 'part'; seq: number; nodebalancers: readonly NodeBalancerSpec[] }
  | { t: 'commit'; seq: number; prepared: PreparedSnapshot }
  | { t: 'health'; events: NodeVerdict[] }
  | { t: 'metrics'; seq: number }
  | { t: 'drain'; deadlineMs: number }
  /** The heartbeat (workers/heartbeat.ts): answered with a pong at once. */
  | { t: 'ping' }
  /** The data plane's TLS ticket secret (docs/dataplane.md, "TLS resumption"). */
  | { t: 'tickets'; secret: Uint8Array }
  /** This worker's socket of a udp port's reuseport group (sent with the message), or why there is none. */
  | { t: 'udp'; id: number; error?: string }
  | AdmitAnswer;

export type FromWorker =
  | { t: 'ready' }
  | { t: 'pong' }
  | { t: 'applied'; seq: number; error?: string }
  | { t: 'passive'; configId: number; nodeId: number; reason: string }
  | { t: 'counters'; deltas: CounterDelta[] }
  | { t: 'metrics'; seq: number; metrics: unknown[] }
  /** A udp listener wants its slot's socket of `ip:port` (workers/udp-group.ts). */
  | { t: 'udp'; id: number; ip: string; port: number }
  | AdmitRequest;

/** What the primary tells a worker when it forks it (environment variable, JSON). */
export interface WorkerSettings {
  slot: number;
  generation: number;
  /** How many worker slots there are: each reads its own socket of every udp port's reuseport group. */
  workers: number;
  limits: Record<string, number | undefined>;
  endpointSource?: string;
  /** Listeners on the wildcard address, one socket per port (docs/dataplane.md, "Wildcard listeners"). */
  wildcard?: boolean;
  /** How often counter deltas go to the primary. */
  countersMs: number;
}

export const WORKER_SETTINGS_ENV = 'FULCRUM_DATAPLANE_WORKER';
