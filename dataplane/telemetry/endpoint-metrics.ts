import { Counter, Gauge, type Registry } from 'prom-client';
import type { DbEndpointStats } from '../endpoints/db-endpoint.js';

/** What a scrape reads of the database endpoints being served (the engine). */
export interface EndpointMetricsSource {
  databaseEndpoints(): Iterable<{ readonly current: { readonly databaseId: number; readonly role: string }; readonly stats: DbEndpointStats }>;
}

/**
 * Database endpoint metrics (docs/databases.md, "Database endpoints"), copied from each
 * endpoint's plain counters at scrape time like the NodeBalancer metrics (telemetry/metrics.ts):
 * the accept path only bumps numbers.
 */
export function registerEndpointMetrics(registry: Registry, source: EndpointMetricsSource): void {
  const labels = ['database_id', 'role'];
  const accepted = new Counter({ name: 'fulcrum_dataplane_database_connections_total', help: 'Database endpoint connections accepted', labelNames: labels, registers: [registry] });
  const open = new Gauge({ name: 'fulcrum_dataplane_database_active_connections', help: 'Database endpoint connections open now', labelNames: labels, registers: [registry] });
  const refused = new Counter({ name: 'fulcrum_dataplane_database_refused_total', help: 'Database endpoint connections refused at accept, by reason', labelNames: [...labels, 'reason'], registers: [registry] });
  const failed = new Counter({ name: 'fulcrum_dataplane_database_member_errors_total', help: 'Database endpoint connections whose member connection failed', labelNames: labels, registers: [registry] });
  let fresh = false;
  const refresh = (): void => {
    if (fresh) return;
    fresh = true;
    queueMicrotask(() => (fresh = false));
    for (const m of [accepted, open, refused, failed]) m.reset();
    for (const e of source.databaseEndpoints()) {
      const l = { database_id: String(e.current.databaseId), role: e.current.role };
      accepted.inc(l, e.stats.accepted);
      open.set(l, e.stats.open);
      failed.inc(l, e.stats.upstreamErrors);
      for (const [reason, n] of Object.entries(e.stats.refused)) refused.inc({ ...l, reason }, n);
    }
  };
  for (const m of [accepted, open, refused, failed] as Array<{ collect?: () => void }>) m.collect = refresh;
}
