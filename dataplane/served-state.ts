import type { ConfigSpec, NodeBalancerSpec } from './config/model.js';
import type { DbEndpointSpec } from './config/endpoint-model.js';
import type { PreparedSnapshot, ServedIndex } from './config/validate-delta.js';

/**
 * What the engine serves, as data: the version, every NodeBalancer's spec, who holds each listen
 * key and config id, and the database endpoints last named. An incremental snapshot is checked
 * (`index`) and applied against it without walking everything. It binds and runs nothing: the
 * listener set (listeners/listener-set.ts) holds the sockets, the runtime set the configs' state.
 */
export class ServedState {
  private readonly nbs = new Map<number, NodeBalancerSpec>();
  private readonly listenOwner = new Map<string, number>();
  private readonly configOwner = new Map<number, number>();
  private servedVersion = 0;
  private served: string[] = [];
  /**
   * The database endpoints of the last snapshot that named them. Kept apart from the endpoint
   * set: a process that binds nothing (the workers' primary) holds no endpoint, yet its
   * keepalived must hold their addresses.
   */
  private endpointSpecs: readonly DbEndpointSpec[] = [];
  /** Who holds a listen key or a config id now; a database endpoint's keys are in the endpoint set. */
  readonly index: ServedIndex;

  constructor(endpointAt: (listenKey: string) => boolean) {
    this.index = {
      listenOwner: (key) => this.listenOwner.get(key) ?? (endpointAt(key) ? 'endpoint' : undefined),
      configOwner: (id) => this.configOwner.get(id),
    };
  }

  /** Version of the snapshot being served (0 = none yet). */
  get version(): number {
    return this.servedVersion;
  }

  has(id: number): boolean {
    return this.nbs.has(id);
  }

  ids(): IterableIterator<number> {
    return this.nbs.keys();
  }

  /** The configs NodeBalancer `id` is served with now (none when it is not served). */
  configsOf(id: number): readonly ConfigSpec[] {
    return this.nbs.get(id)?.configs ?? [];
  }

  /** Serves `nb` in place of what it was; true when it is new or its ipv4 moved. */
  serve(nb: NodeBalancerSpec): boolean {
    const prev = this.nbs.get(nb.id);
    for (const c of prev?.configs ?? []) this.configOwner.delete(c.id);
    this.nbs.set(nb.id, nb);
    for (const c of nb.configs) {
      this.configOwner.set(c.id, nb.id);
      this.listenOwner.set(c.listenKey, nb.id);
      if (c.listenKey6 !== '') this.listenOwner.set(c.listenKey6, nb.id);
    }
    return prev?.ipv4 !== nb.ipv4;
  }

  remove(id: number): void {
    for (const c of this.configsOf(id)) this.configOwner.delete(c.id);
    this.nbs.delete(id);
  }

  /** A listen key no NodeBalancer serves any more. */
  releaseListenKey(key: string): void {
    this.listenOwner.delete(key);
  }

  /**
   * Ends a commit: the version now served and the database endpoints (null: unchanged). The
   * addresses are worked out again only when some may have moved (`addressesMoved`).
   */
  settle(version: number, eps: readonly DbEndpointSpec[] | null, addressesMoved: boolean): void {
    this.servedVersion = version;
    if (eps) this.endpointSpecs = eps;
    // Keepalived holds every address served here: NodeBalancers' and database endpoints', so
    // hosts.primary moves with the pair (docs/multi-host.md).
    if (addressesMoved) {
      this.served = [...new Set([...[...this.nbs.values()].map((nb) => nb.ipv4), ...this.endpointSpecs.map((e) => e.address)])].sort();
    }
  }

  /** The addresses served (NodeBalancers' ipv4 and database endpoints'), sorted, distinct. */
  addresses(): string[] {
    return this.served;
  }

  /** Everything served, as one whole prepared snapshot (a new worker starts from it). */
  snapshot(): PreparedSnapshot {
    return { version: this.servedVersion, baseVersion: null, nodebalancers: [...this.nbs.values()], removed: [], databaseEndpoints: this.endpointSpecs };
  }
}
