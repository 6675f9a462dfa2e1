import type { DatabaseEndpoint } from '../../proto/gen/fulcrum/v1/DatabaseEndpoint.js';
import type { DatabaseRecord } from '../domain/databases/model.js';
import { endpointRoutes } from '../domain/databases/endpoint-routes.js';

export interface RegionalEndpoint {
  region: string;
  ep: DatabaseEndpoint;
}

/**
 * Every live database's endpoints in the data planes' proto shape (docs/databases.md, "Database
 * endpoints"): hosts.primary leads to the primary, hosts.secondary to the replicas, each with
 * the database's allow_list and TLS rule. A database being deleted has none, so its addresses
 * are released on every data plane.
 */
export function buildDatabaseEndpoints(dbs: DatabaseRecord[]): RegionalEndpoint[] {
  const out: RegionalEndpoint[] = [];
  for (const d of [...dbs].sort((a, b) => a.id - b.id)) {
    if (d.deleting || !d.hostPrimary) continue;
    const routes = endpointRoutes(d);
    const base = { databaseId: d.id, port: d.port, allowList: [...d.allowList], requireTls: d.sslConnection };
    out.push({ region: d.region, ep: { ...base, role: 'primary', address: d.hostPrimary, targets: routes.primary ? [routes.primary] : [] } });
    if (d.hostSecondary) out.push({ region: d.region, ep: { ...base, role: 'secondary', address: d.hostSecondary, targets: routes.secondaries } });
  }
  return out;
}
