import { Counter, Gauge, Histogram, type Registry } from 'prom-client';

/** The agent's metrics: on the injected registry, `fulcrum_` prefix, base units, bounded labels. */
export function createAgentMetrics(registry: Registry) {
  return {
    databases: new Gauge({ name: 'fulcrum_agent_databases', help: 'Databases by observed status', labelNames: ['status'], registers: [registry] }),
    actions: new Counter({ name: 'fulcrum_agent_actions_total', help: 'Reconcile actions executed', labelNames: ['action', 'result'], registers: [registry] }),
    actionSeconds: new Histogram({
      name: 'fulcrum_agent_action_duration_seconds', help: 'Duration of reconcile actions', labelNames: ['action'],
      buckets: [0.1, 0.5, 1, 2, 5, 10, 30, 60, 300], registers: [registry],
    }),
    desiredRefused: new Counter({ name: 'fulcrum_agent_desired_refused_total', help: 'Desired states refused because they would delete every database without the control plane marking it intended', registers: [registry] }),
    failovers: new Counter({ name: 'fulcrum_agent_failovers_total', help: 'Primaries replaced after a failure', registers: [registry] }),
    backups: new Counter({ name: 'fulcrum_agent_backups_total', help: 'Backups taken', labelNames: ['type', 'result'], registers: [registry] }),
    archiveLag: new Gauge({
      name: 'fulcrum_agent_binlog_archive_lag_seconds',
      help: 'How far the binlog archive of this agent\'s most-behind database is behind (0: every round succeeds); grows while the backup store is unreachable',
      registers: [registry],
    }),
  };
}

export type AgentMetrics = ReturnType<typeof createAgentMetrics>;
