import type { DatabaseEndpoint } from '../../proto/gen/fulcrum/v1/DatabaseEndpoint.js';
import type { DatabaseRecord } from '../domain/databases/model.js';
import { endpointRoutes } from '../domain/databases/endpoint-routes.js';

export interface RegionalEndpoint {
  region: string;
  ep: DatabaseEndpoint;
}

/** What one database's endpoints are made of. */
export type EndpointSource = Pick<DatabaseRecord, 'id' | 'hostPrimary' | 'hostSecondary' | 'port' | 'allowList' | 'sslConnection' | 'members'>;

/**
 * One database's endpoints in the data planes' proto shape (docs/databases.md, "Database
 * endpoints"): hosts.primary leads to the primary, hosts.secondary to the replicas, each with
 * the database's allow_list and TLS rule; no member while a restore runs (`restoring`).
 */
export function endpointsOf(d: EndpointSource, restoring = false): DatabaseEndpoint[] {
  if (!d.hostPrimary) return [];
  const routes = endpointRoutes(d, restoring);
  const base = { databaseId: d.id, port: d.port, allowList: [...d.allowList], requireTls: d.sslConnection };
  const out: DatabaseEndpoint[] = [{ ...base, role: 'primary', address: d.hostPrimary, targets: routes.primary ? [routes.primary] : [] }];
  if (d.hostSecondary) out.push({ ...base, role: 'secondary', address: d.hostSecondary, targets: routes.secondaries });
  return out;
}

/**
 * Every live database's endpoints with their region. A database being deleted has none, so its
 * addresses are released on every data plane. `restoring`: the databases a restore operation is
 * pending for.
 */
export function buildDatabaseEndpoints(dbs: DatabaseRecord[], restoring: ReadonlySet<number> = new Set()): RegionalEndpoint[] {
  return [...dbs]
    .sort((a, b) => a.id - b.id)
    .filter((d) => !d.deleting)
    .flatMap((d) => endpointsOf(d, restoring.has(d.id)).map((ep) => ({ region: d.region, ep })));
}
