import type { DatabaseRecord } from './model.js';

/** Where a member listens: the agents run every member's server on this port. */
export const MEMBER_PORT = 3306;

export interface MemberAddress {
  host: string;
  port: number;
}

/** Which members a database's endpoints lead to (docs/databases.md, "Database endpoints"). */
export interface EndpointRoutes {
  /** hosts.primary: the member that takes writes; undefined while it is not known. */
  primary?: MemberAddress;
  /** hosts.secondary: the replicas, or the primary alone when there is none. */
  secondaries: MemberAddress[];
}

/**
 * The one place that decides which member is the primary and where it listens; the data
 * planes' snapshot (push/endpoint-builder.ts) follows it. Today it reads what the database's
 * agent last reported (`members`: address -> "primary" | "failover"). While a restore rewrites
 * the data (`restoring`: its operation is pending), no client is let through (as the agent's own
 * proxy did before). The routes open when the restore ends, while the status still reads
 * `restoring`: it reads `active` once the data planes route there (activation-gate.ts).
 */
export function endpointRoutes(db: Pick<DatabaseRecord, 'members'>, restoring = false): EndpointRoutes {
  if (restoring) return { secondaries: [] };
  const entries = Object.entries(db.members).sort(([a], [b]) => a.localeCompare(b));
  const at = (host: string): MemberAddress => ({ host, port: MEMBER_PORT });
  const primary = entries.find(([, role]) => role === 'primary')?.[0];
  if (!primary) return { secondaries: [] };
  const replicas = entries.filter(([, role]) => role === 'failover').map(([host]) => at(host));
  return { primary: at(primary), secondaries: replicas.length > 0 ? replicas : [at(primary)] };
}
