import type { Logger } from '../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { AdminTarget } from '../mysql/admin.js';
import type { ClusterNode } from '../mysql/promotion.js';
import type { RemoteMember } from '../mysql/remote.js';
import type { ContainerRuntime, NodeSpec } from '../runtime/container-runtime.js';
import type { DbState } from './state.js';

/**
 * What a cluster action may use of its database. The controller builds one per database and
 * hands each action only the members it declares (a `Pick` of this), so an action never sees
 * the controller's loop state (lock, counters, proxies, observation) and never writes it: it
 * hands the change it made to the persisted `state` to `updateState` (state.ts), and the
 * controller decides the rest from the action's outcome (docs/agent.md, "One writer").
 */
export interface ClusterContext {
  readonly id: number;
  readonly log: Logger;
  readonly runtime: ContainerRuntime;
  /** The agent id the nodes are labelled with. */
  readonly agentId: string;
  /** The database's folder in the agent's state (TLS material, state.json, node data). */
  readonly dir: string;
  /** The database's backups folder. */
  readonly backupsDir: string;
  /** The desired database acted on: the control plane's latest, else the last one persisted. */
  readonly spec: DesiredDatabase__Output;
  /** The persisted state, read here; a change goes through `updateState(db, { ... })` (state.ts). */
  readonly state: DbState;
  /** semi_synch replication with more than one node. */
  readonly semiSync: boolean;
  /** Some members run on other agents; this agent runs the local ones (docs/databases.md, "Clusters across hosts"). */
  readonly spread: boolean;
  /** Node indexes, 1 to the cluster size. */
  nodeIndexes(): number[];
  nodeName(k: number): string;
  /** The spec node k must run with (the binary or image in `state.running`). */
  nodeSpec(k: number): NodeSpec;
  /** Root over node k's Unix socket; no I/O beyond asking the runtime for the socket path. */
  adminTarget(k: number): Promise<AdminTarget>;
  clusterNode(k: number): Promise<ClusterNode>;
  primaryAddress(): string;
  /** The primary's gtid_binlog_state, over its socket or (another host) the network. */
  primaryBinlogState(): Promise<string>;
  /** The primary is still read-only (named, not promoted yet). */
  primaryReadOnly(): Promise<boolean>;
  /** The primary when it runs on another agent and its address is known. */
  remotePrimary(): RemoteMember | undefined;
  /** The engine build the desired state asks for; throws when the catalogue has none. */
  resolveEngine(): DbState['running'];
  /** `count` free node addresses from the agent's pool. */
  allocateAddresses(count: number): Promise<string[]>;
  /** Makes the database's CA, server certificate (and key file) exist; idempotent. */
  ensureTls(): Promise<void>;
  /** Persists `state` (a no-op once the database is being deleted). */
  save(): Promise<void>;
  /** Records an agent event for the control plane (and logs it). */
  emit(action: string, message: string, status?: string): void;
  /** Polls `cond` until it holds; throws after `timeoutMs`. Errors from `cond` count as false. */
  wait(cond: () => Promise<boolean>, timeoutMs: number): Promise<void>;
  /** Makes the linroot accounts mirror the allow_list and password (on the primary). */
  syncAccounts(): Promise<void>;
  /** The linroot password: a credentials reset in progress, else the desired one. */
  linrootPassword(): string;
  /** Observes the nodes again and lets the members accept PROXY headers from the data planes. */
  refresh(): Promise<void>;
  /**
   * Before the nodes stop (suspend, delete). The endpoints live on the data planes, which stop
   * routing by the control plane's state, so the controller has nothing to close today.
   */
  closeEndpoints(): Promise<void>;
  /** Resolves once no save of the database's state is in flight (a removal waits for it). */
  settleSaves(): Promise<void>;
  /**
   * A fork's data, loaded on the primary while it is provisioned (agent/binlog/replay.ts); a
   * no-op for a database that is not a fork.
   */
  seed(): Promise<void>;
}

/** What seeding a rebuilt member from the store's physical base did: the base placed, or why none was. */
export type MemberSeed =
  | { backupId: number; snapshotGtid: string; bytes: number; ms: Record<string, number> }
  | { skipped: string };
