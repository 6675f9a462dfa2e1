import type { NodeBalancer as NbProto } from '../../proto/gen/fulcrum/v1/NodeBalancer.js';
import type { DatabaseEndpoint } from '../../proto/gen/fulcrum/v1/DatabaseEndpoint.js';
import { regionServed } from '../domain/regions.js';
import type { RegionalEndpoint } from './endpoint-builder.js';
import type { NodeBalancerResources } from './nodebalancer-resources.js';
import { contentHash, type VersionLedger, type SnapshotSource, type Subscriber } from './snapshot-cache.js';

/** One push round: what changed in it, the database endpoints, and the version of the whole state. */
export interface ConfigRound {
  changed: number[];
  endpoints: RegionalEndpoint[];
  version: number;
}

/** What one data plane is sent: a whole snapshot, or (incremental) what changed on top of `baseVersion`. */
export interface ConfigContent {
  nodebalancers: NbProto[];
  databaseEndpoints: DatabaseEndpoint[];
  incremental?: boolean;
  baseVersion?: number;
  removedNodebalancers?: number[];
  databaseEndpointsChanged?: boolean;
}

/** What the control plane believes a data plane holds once it applies what it was sent. */
interface Held {
  /** NodeBalancer id -> content hash. */
  nodebalancers: Map<number, string>;
  endpointsHash: string;
  version: number;
  /** NodeBalancers changed since the last send; a delta looks at these only. */
  dirty: Set<number>;
}

/**
 * The data planes' push source over the per-NodeBalancer cache (docs/dataplane.md,
 * "Incremental snapshots"). A round rebuilds only the invalidated NodeBalancers; the version is
 * that of the whole state (all data planes share it, so equal versions mean equal content in
 * any region) and is looked up from the running digest, so a round's cost follows the change.
 * A full snapshot lists what the data plane's region serves; a delta lists the NodeBalancers
 * that differ from what it holds, looking only at those changed since its last send.
 * `onRound` hears which endpoints each round's version holds (route-acks.ts).
 */
export function configSource(
  resources: NodeBalancerResources, ledger: VersionLedger, endpoints: () => Promise<RegionalEndpoint[]>,
  onRound?: (endpoints: readonly RegionalEndpoint[], version: number) => void,
): SnapshotSource<ConfigRound, ConfigContent> {
  const held = new WeakMap<Subscriber<ConfigContent>, Held>();
  const holding = (sub: Subscriber<ConfigContent>): Held => {
    let h = held.get(sub);
    if (!h) held.set(sub, (h = { nodebalancers: new Map(), endpointsHash: '', version: 0, dirty: new Set() }));
    return h;
  };
  const endpointsFor = (round: ConfigRound, region: string): DatabaseEndpoint[] =>
    round.endpoints.filter((e) => regionServed(region, e.region)).map((e) => e.ep);
  // A state without database endpoints hashes without them, as before they existed.
  const endpointsHash = (eps: unknown[]): string => (eps.length > 0 ? contentHash(eps) : '');
  return {
    async read(subscribers) {
      const changed = await resources.refresh();
      const eps = await endpoints();
      const version = await ledger.versionFor('config_hash', contentHash([resources.digest('*'), endpointsHash(eps.map((e) => [e.region, e.ep]))]));
      resources.stamp(changed, version);
      onRound?.(eps, version);
      for (const sub of subscribers) for (const id of changed) holding(sub).dirty.add(id);
      return { changed, endpoints: eps, version };
    },
    hash: (round, sub) => contentHash([resources.digest(sub.region), endpointsHash(endpointsFor(round, sub.region))]),
    select(round, sub) {
      const h = holding(sub);
      const served = resources.servedIn(sub.region);
      const eps = endpointsFor(round, sub.region);
      h.nodebalancers = new Map(served.map((b) => [b.nb.id as number, b.hash]));
      h.endpointsHash = endpointsHash(eps);
      h.version = round.version;
      h.dirty.clear();
      return { nodebalancers: served.map((b) => b.nb), databaseEndpoints: eps };
    },
    delta(round, sub) {
      const h = holding(sub);
      const upserts: NbProto[] = [];
      const removed: number[] = [];
      for (const id of h.dirty) {
        const b = resources.get(id);
        if (b && regionServed(sub.region, b.region)) {
          if (h.nodebalancers.get(id) === b.hash) continue;
          h.nodebalancers.set(id, b.hash);
          upserts.push(b.nb);
        } else if (h.nodebalancers.delete(id)) {
          removed.push(id);
        }
      }
      h.dirty.clear();
      const eps = endpointsFor(round, sub.region);
      const epsHash = endpointsHash(eps);
      const epsChanged = epsHash !== h.endpointsHash;
      h.endpointsHash = epsHash;
      const baseVersion = h.version;
      h.version = round.version;
      return {
        nodebalancers: upserts, databaseEndpoints: epsChanged ? eps : [], incremental: true, baseVersion,
        removedNodebalancers: removed, databaseEndpointsChanged: epsChanged,
      };
    },
    resume(round, sub, version) {
      // Versions are global and content-addressed: the same version is the same state.
      if (version !== round.version) return undefined;
      this.select(round, sub);
      return { nodebalancers: [], databaseEndpoints: [], incremental: true, baseVersion: version, removedNodebalancers: [], databaseEndpointsChanged: false };
    },
    version: async (round) => round.version,
  };
}
