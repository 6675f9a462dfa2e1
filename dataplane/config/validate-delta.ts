import { ErrorCollector, FulcrumError } from '../../lib/errors.js';
import type { DbEndpointSpec } from './endpoint-model.js';
import type { NodeBalancerSpec } from './model.js';
import { validateNodeBalancer, type SnapshotInput } from './validate.js';
import { validateEndpoints } from './validate-endpoints.js';

/** A validated incremental snapshot (docs/dataplane.md, "Incremental snapshots"). */
export interface DeltaSpec {
  readonly version: number;
  /** The version it applies on top of; the engine refuses it on any other. */
  readonly baseVersion: number;
  /** Added and changed NodeBalancers, each whole. */
  readonly nodebalancers: readonly NodeBalancerSpec[];
  readonly removed: readonly number[];
  /** The new set of database endpoints, or null to keep the served one. */
  readonly databaseEndpoints: readonly DbEndpointSpec[] | null;
}

/**
 * A snapshot, whole or incremental, validated by one engine, which any engine serving the same
 * version commits without validating again: the workers' primary validates once for all of them
 * (docs/dataplane.md, "Workers"). Plain data, so it crosses the IPC channel as it is.
 */
export interface PreparedSnapshot {
  readonly version: number;
  /** The version it applies on; null for a whole state, which removes what it does not name. */
  readonly baseVersion: number | null;
  readonly nodebalancers: readonly NodeBalancerSpec[];
  readonly removed: readonly number[];
  readonly databaseEndpoints: readonly DbEndpointSpec[] | null;
}

/** What the data plane serves now, which a delta is checked against. */
export interface ServedIndex {
  /** Who serves a listen key: a NodeBalancer's id, `endpoint` for a database endpoint. */
  listenOwner(key: string): number | 'endpoint' | undefined;
  /** The NodeBalancer a config id belongs to. */
  configOwner(id: number): number | undefined;
}

/**
 * Validates an incremental snapshot: each added or changed NodeBalancer exactly as in a whole
 * snapshot, and its listen keys and config ids against those of the NodeBalancers and database
 * endpoints that stay. Costs time in proportion to the change. Throws
 * FulcrumError('invalid_config') listing every problem, before anything is applied.
 */
export function validateDelta(input: SnapshotInput, served: ServedIndex): DeltaSpec {
  const errs = new ErrorCollector();
  const version = Number(input.version ?? 0);
  if (!Number.isSafeInteger(version) || version < 0) errs.add('version', 'must be a non-negative integer');
  const baseVersion = Number(input.baseVersion ?? 0);
  if (!Number.isSafeInteger(baseVersion) || baseVersion < 0) errs.add('base_version', 'must be a non-negative integer');
  const upserts = input.nodebalancers ?? [];
  const replaced = new Set<number>(upserts.map((nb) => Number(nb.id)));
  const removed: number[] = [];
  (input.removedNodebalancers ?? []).forEach((raw, i) => {
    const id = Number(raw);
    if (!Number.isSafeInteger(id) || id <= 0) errs.add(`removed_nodebalancers[${i}]`, 'must be a positive integer');
    else if (replaced.has(id)) errs.add(`removed_nodebalancers[${i}]`, `NodeBalancer ${id} is both changed and removed`);
    else removed.push(id);
  });
  for (const id of removed) replaced.add(id);
  const endpointsReplaced = input.databaseEndpointsChanged === true;

  // Claims of this delta first; then those of what stays served.
  const listen = new Map<string, string>();
  const configIds = new Set<number>();
  const claims = {
    listen: {
      get(key: string): string | undefined {
        const mine = listen.get(key);
        if (mine) return mine;
        const owner = served.listenOwner(key);
        if (owner === 'endpoint') return endpointsReplaced ? undefined : 'a database endpoint';
        return owner === undefined || replaced.has(owner) ? undefined : `NodeBalancer ${owner}`;
      },
      set: (key: string, by: string) => listen.set(key, by),
    },
    configIds: {
      has(id: number): boolean {
        if (configIds.has(id)) return true;
        const owner = served.configOwner(id);
        return owner !== undefined && !replaced.has(owner);
      },
      add: (id: number) => configIds.add(id),
    },
  };
  const nbs = upserts.map((nb, i) => validateNodeBalancer(nb, `nodebalancers[${i}]`, errs, claims));
  const databaseEndpoints = endpointsReplaced ? validateEndpoints(input.databaseEndpoints ?? [], errs, claims.listen) : null;
  if (!errs.empty) throw new FulcrumError('invalid_config', errs.errors);
  return Object.freeze({
    version, baseVersion, nodebalancers: Object.freeze(nbs), removed: Object.freeze(removed),
    databaseEndpoints: databaseEndpoints && Object.freeze(databaseEndpoints),
  });
}
