import { join } from 'node:path';
import { randomUUID } from 'node:crypto';
import { systemClock, type Clock } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { AgentEvent } from '../../proto/gen/fulcrum/v1/AgentEvent.js';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { allocateAddresses } from '../address-pool.js';
import type { AgentMetrics } from '../agent-metrics.js';
import { resolveEngine, type Catalogue } from '../catalogue.js';
import type { AdminTarget } from '../mysql/admin.js';
import { ensureClusterTls, ensureKeyFile, type ClusterTls } from '../mysql/tls.js';
import type { ContainerRuntime, NodeSpec } from '../runtime/container-runtime.js';
import { syncAccounts } from './accounts.js';
import type { ClusterContext } from './context.js';
import { buildNodeSpec, nodeName } from './node-spec.js';
import { databaseDir, loadDbState, NODE_PORT, saveDbState, type DbState } from './state.js';

export interface ControllerDeps {
  id: number;
  agentId: string;
  /** Short stable token of the agent id, part of node names. */
  agentKey: string;
  stateDir: string;
  runtime: ContainerRuntime;
  runtimeKind: 'process' | 'docker';
  catalogue: Catalogue;
  logger: Logger;
  clock: Clock;
  nodeAddressPool: string;
  takenAddresses: () => Set<string>;
  onChange: () => void;
  metrics?: AgentMetrics;
}

/**
 * One database's facts: its desired and persisted state, its nodes (names, specs, admin
 * access, TLS material) and its events. The controller (controller.ts) adds the action loop on
 * top and supplies `refresh` and `closeEndpoints`; `context` is the narrow view actions get.
 */
export abstract class Cluster {
  /** The control plane's desired database; undefined once it is to be deleted. */
  desired?: DesiredDatabase__Output;
  state?: DbState;
  /** Set once a delete has started; nothing is saved any more. */
  deleted = false;
  /** Overrides the desired password while a credentials reset is being applied. */
  pendingPassword?: string;
  readonly log: Logger;
  /** The database as its actions see it (live, read-only views of this object). */
  protected readonly context: ClusterContext;
  protected tls?: ClusterTls;
  private keyfile?: string;
  protected readonly events: AgentEvent[] = [];

  constructor(readonly deps: ControllerDeps) {
    this.log = deps.logger.child({ component: 'database', database: deps.id });
    this.state = loadDbState(deps.stateDir, deps.id);
    this.context = this.makeContext();
  }

  /** Observes the nodes again and lets the members accept PROXY headers from the data planes. */
  abstract refresh(): Promise<void>;
  abstract closeEndpoints(): Promise<void>;
  /** A fork's data (the controller asks the day-two services). */
  protected abstract seedData(): Promise<void>;

  get id(): number {
    return this.deps.id;
  }
  get dir(): string {
    return databaseDir(this.deps.stateDir, this.deps.id);
  }
  get clusterSize(): number {
    return this.state?.addresses.length || this.desired?.clusterSize || 1;
  }
  get semiSync(): boolean {
    const d = this.desired ?? this.state?.desired;
    return d?.replicationType === 'semi_synch' && this.clusterSize > 1;
  }
  nodeName(k: number): string {
    return nodeName(this.deps.agentKey, this.id, k);
  }
  nodeIndexes(): number[] {
    return Array.from({ length: this.clusterSize }, (_, i) => i + 1);
  }
  async adminTarget(k: number): Promise<AdminTarget> {
    const c = await this.deps.runtime.connection(this.nodeName(k));
    return { socketPath: c.socketPath, password: this.state!.adminPassword };
  }
  primaryAddress(): string {
    return this.state?.addresses[(this.state?.primary ?? 1) - 1] ?? '';
  }
  /** The node spec the desired state calls for (with the binary/image in state.running). */
  nodeSpec(k: number): NodeSpec {
    return buildNodeSpec({
      agentId: this.deps.agentId, agentKey: this.deps.agentKey, databaseId: this.id, dir: this.dir,
      desired: this.desired ?? this.state!.desired!, state: this.state!, tls: this.tls!, keyfile: this.keyfile, semiSync: this.semiSync,
    }, k);
  }

  emit(action: string, message: string, status = 'finished'): void {
    this.events.push({ id: randomUUID(), action, message, atMs: this.deps.clock.now(), status });
    if (this.events.length > 20) this.events.splice(0, this.events.length - 20);
    this.log.info({ action }, message);
    this.deps.onChange();
  }

  async save(): Promise<void> {
    if (this.state && !this.deleted) await saveDbState(this.deps.stateDir, this.state);
  }

  async syncAccounts(): Promise<void> {
    await syncAccounts(this.context);
  }

  protected resolveEngine(): DbState['running'] {
    const d = this.desired!;
    const e = resolveEngine(this.deps.catalogue, { engineId: d.engineId, binary: d.binary || undefined, image: d.image || undefined }, this.deps.runtimeKind);
    return { binary: e.binary, image: e.image, version: e.version };
  }

  protected async ensureTls(): Promise<void> {
    const d = this.desired ?? this.state!.desired!;
    this.tls = await ensureClusterTls(join(this.dir, 'tls'), this.id, [...this.state!.addresses, d.hostPrimary, d.hostSecondary]);
    if (d.encrypted) this.keyfile = await ensureKeyFile(join(this.dir, 'tls'));
  }

  private makeContext(): ClusterContext {
    const state = () => this.state!;
    const spec = () => this.desired ?? this.state!.desired!;
    const semiSync = () => this.semiSync;
    return {
      id: this.id,
      log: this.log,
      runtime: this.deps.runtime,
      agentId: this.deps.agentId,
      dir: this.dir,
      backupsDir: join(this.deps.stateDir, 'backups', String(this.id)),
      get spec() { return spec(); },
      get state() { return state(); },
      get semiSync() { return semiSync(); },
      nodeIndexes: () => this.nodeIndexes(),
      nodeName: (k) => this.nodeName(k),
      nodeSpec: (k) => this.nodeSpec(k),
      adminTarget: (k) => this.adminTarget(k),
      clusterNode: async (k) => ({ index: k, address: this.state!.addresses[k - 1]!, port: NODE_PORT, admin: await this.adminTarget(k) }),
      primaryAddress: () => this.primaryAddress(),
      resolveEngine: () => this.resolveEngine(),
      allocateAddresses: (count) => allocateAddresses(this.deps.nodeAddressPool, count, this.deps.takenAddresses()),
      ensureTls: () => this.ensureTls(),
      save: () => this.save(),
      emit: (action, message, status) => this.emit(action, message, status),
      wait: waitFor,
      syncAccounts: () => this.syncAccounts(),
      linrootPassword: () => this.pendingPassword ?? spec().rootPassword,
      refresh: () => this.refresh(),
      closeEndpoints: () => this.closeEndpoints(),
      seed: () => this.seedData(),
    };
  }
}

/** Polls real servers, so wall time whatever clock the agent was given. */
async function waitFor(cond: () => Promise<boolean>, timeoutMs: number): Promise<void> {
  const end = systemClock.now() + timeoutMs;
  for (;;) {
    try {
      if (await cond()) return;
    } catch {
      // Retry until the deadline.
    }
    if (systemClock.now() > end) throw new Error('timed out waiting for the cluster');
    await systemClock.sleep(100);
  }
}
