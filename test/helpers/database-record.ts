import type { DatabaseRecord } from '../../control-plane/domain/databases/model.js';

/**
 * A database record as the store keeps it, for tests over the real store: a 1-node MariaDB 10.11
 * that is still provisioning, with `over` changed.
 */
export function databaseRecord(over: Partial<Omit<DatabaseRecord, 'id'>> = {}): Omit<DatabaseRecord, 'id'> {
  return {
    label: 'one', region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11.14', version: '10.11.14', image: '', binary: '',
    clusterSize: 1, replicationType: 'none', encrypted: false, sslConnection: true, allowList: [],
    updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null }, status: 'provisioning',
    hostPrimary: '127.79.0.1', hostSecondary: '', port: 3306, provisioned: false, members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: {}, secondEventId: null,
    rootPassword: 'x'.repeat(16), nextPassword: null, generation: 1, convergedGeneration: 0, runState: 'running', agentId: null, term: 1,
    primaryMember: 1, pendingEventId: null, deleting: false, deleteEventId: null, lastError: null, created: 0, updated: 0,
    ...over,
  };
}
