import type { DataplaneRepository } from '../domain/nodebalancers/repository.js';
import type { KeyValueRepository } from '../domain/ports.js';
import type { NodeBalancerRepository } from '../domain/nodebalancers/repository.js';
import { DataplaneSources } from './dataplane-sources.js';
import { NodeBalancerResources } from './nodebalancer-resources.js';
import { VersionLedger, type SubscriberStatusStore } from './snapshot-cache.js';

/**
 * What the config push keeps in the store, behind the objects the push server uses: the
 * NodeBalancers as the data planes get them, the data planes' status, the config version and
 * where the data planes dial members from. Built once by compose/; the server itself imports no
 * repository (docs/architecture.md, "Who owns what").
 */
export interface ConfigStore {
  resources: NodeBalancerResources;
  status: SubscriberStatusStore;
  /** Versions of the whole data-plane state ('config_version' in the key-value store). */
  ledger: VersionLedger;
  /** The data planes' member-facing addresses; `onChange` hears of one new or gone. */
  sources(onChange: () => void): DataplaneSources;
}

export function configStore(repo: NodeBalancerRepository, dataplanes: DataplaneRepository, kv: KeyValueRepository): ConfigStore {
  return {
    resources: new NodeBalancerResources(repo),
    status: dataplaneStatus(dataplanes),
    ledger: new VersionLedger(kv, 'config_version'),
    sources: (onChange) => new DataplaneSources(kv, onChange),
  };
}

/** Data-plane status as the push cache sees it (`versionApplied` is the applied version). */
function dataplaneStatus(dataplanes: DataplaneRepository): SubscriberStatusStore {
  const toStatus = (s: Awaited<ReturnType<DataplaneRepository['get']>>) => s && { ...s, appliedVersion: s.versionApplied };
  return {
    get: async (id) => toStatus(await dataplanes.get(id)),
    list: async () => (await dataplanes.list()).map((s) => toStatus(s)!),
    put: ({ appliedVersion, ...s }) => dataplanes.upsert({
      id: s.id, region: s.region, connected: s.connected, replica: s.replica, versionApplied: appliedVersion,
      lastError: s.lastError, lastErrorAt: s.lastErrorAt, lastSeen: s.lastSeen,
    }),
    release: (replica, id, at) => dataplanes.release(replica, id, at),
  };
}
