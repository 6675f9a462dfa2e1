import { describe, expect, it } from 'vitest';
import { agentContent } from '../../../control-plane/push/agent-desired.js';
import type { DatabaseRecord, MemberPlacement, OperationRecord } from '../../../control-plane/domain/databases/model.js';

/**
 * What each agent is sent of a cluster spread over agents (docs/databases.md, "Clusters across
 * hosts"): its members marked local, the others' reported addresses, the term and primary, and
 * the shared CA and replication password; a cluster on one agent gets none of the shared secrets.
 */
describe('the desired state of a spread cluster', () => {
  const secrets = { caCertPem: 'CA PEM', caKeyPem: 'CA KEY', replPassword: 'repl' };
  const db = (over: Partial<DatabaseRecord> = {}) => ({
    id: 5, label: 'x', region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11', version: '10.11', image: '', binary: '/b', clusterSize: 3,
    replicationType: 'semi_synch', encrypted: false, sslConnection: true, allowList: [], status: 'active', hostPrimary: '198.18.1.2', hostSecondary: '198.18.1.3', port: 3306,
    provisioned: true, members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: {}, rootPassword: 'pw', nextPassword: null, generation: 1,
    convergedGeneration: 1, runState: 'running', agentId: 'a', term: 3, primaryMember: 2, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null,
    lastError: null, created: 0, updated: 0, clusterSecrets: secrets,
    updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null, pending: [] }, ...over,
  }) as unknown as DatabaseRecord;
  const spread: MemberPlacement[] = [{ databaseId: 5, member: 1, agentId: 'a' }, { databaseId: 5, member: 2, agentId: 'b' }, { databaseId: 5, member: 3, agentId: 'c' }];
  const addressOf = (_db: number, m: number) => (m === 2 ? '198.18.2.9:3306' : '');

  it('names local members, peers\' addresses, term, primary and the shared CA and password', () => {
    const [d] = agentContent('c', [db()], spread, [], () => [], addressOf).databases;
    expect(d!.members!.map((m) => [m.index, m.local, m.address])).toEqual([[1, false, ''], [2, false, '198.18.2.9:3306'], [3, true, '']]);
    expect([d!.term, d!.primaryMember]).toEqual([3, 2]);
    expect([d!.clusterCaPem, d!.clusterCaKeyPem, d!.replicationPassword]).toEqual(['CA PEM', 'CA KEY', 'repl']);
  });

  it('sends each member\'s server_id: the index unless it was placed on a new host', () => {
    const moved = spread.map((m) => (m.member === 2 ? { ...m, agentId: 'd', serverId: 4 } : m));
    const [d] = agentContent('c', [db()], moved, [], () => [], addressOf).databases;
    expect(d!.members!.map((m) => [m.index, m.serverId])).toEqual([[1, 1], [2, 4], [3, 3]]);
  });

  it('carries the control plane\'s seeding mark on the marked member only, to every agent of the cluster', () => {
    const seeding = spread.map((m) => (m.member === 3 ? { ...m, agentId: 'd', seed: { since: 1, gtid: 40 } } : m));
    for (const agent of ['a', 'b', 'd']) {
      const [d] = agentContent(agent, [db()], seeding, [], () => [], addressOf).databases;
      expect(d!.members!.map((m) => [m.index, m.seeding === true])).toEqual([[1, false], [2, false], [3, true]]);
    }
    // The mark cleared: the member is sent as any other (no field at all).
    const [d] = agentContent('d', [db()], spread.map((m) => (m.member === 3 ? { ...m, agentId: 'd' } : m)), [], () => [], addressOf).databases;
    expect(d!.members!.some((m) => 'seeding' in m)).toBe(false);
  });

  it('sends the database\'s backup key to each member agent and to no other', () => {
    const key = Buffer.alloc(32, 3).toString('base64');
    for (const agent of ['a', 'b', 'c']) expect(agentContent(agent, [db({ backupKey: key })], spread, []).databases[0]!.backupKey).toBe(key);
    expect(JSON.stringify(agentContent('z', [db({ backupKey: key })], spread, []))).not.toContain(key);
    expect(agentContent('a', [db({ backupKey: null })], spread, []).databases[0]!.backupKey ?? '').toBe('');
  });

  it('sends the position the primary was named for with its term (none from a row without one, none to a cluster on one agent)', () => {
    expect(agentContent('c', [db({ primaryPosition: '0-1-10' })], spread, []).databases[0]!.primaryPosition).toBe('0-1-10');
    expect(agentContent('c', [db()], spread, []).databases[0]!.primaryPosition).toBe('');
    expect(agentContent('a', [db({ primaryPosition: '0-1-10' })], spread.map((m) => ({ ...m, agentId: 'a' })), []).databases[0]!.primaryPosition).toBe('');
  });

  it('sends the term of the abandoned switchover\'s fence to a spread cluster\'s agents (0 from a row without one)', () => {
    expect(agentContent('a', [db({ fenceLiftedTerm: 4 })], spread, []).databases[0]!.fenceLiftedTerm).toBe(4);
    expect(agentContent('a', [db()], spread, []).databases[0]!.fenceLiftedTerm).toBe(0);
  });

  it('sends no shared secrets, and no primary, when one agent runs every member', () => {
    const whole = spread.map((m) => ({ ...m, agentId: 'a' }));
    const [d] = agentContent('a', [db()], whole, [], () => [], addressOf).databases;
    expect(d!.primaryMember).toBe(0);
    expect(d!.clusterCaKeyPem ?? '').toBe('');
    expect(d!.replicationPassword ?? '').toBe('');
    expect(agentContent('z', [db()], spread, []).databases).toEqual([]);
  });

  it('sends a switchover\'s fence and catch-up only to the agent each is addressed to, other operations to the reporting agent', () => {
    const op = (id: string, kind: OperationRecord['kind'], payload: Record<string, unknown>): OperationRecord => ({ id, databaseId: 5, kind, payload, eventId: null, state: 'pending', error: null, created: 1 });
    const pending = [
      op('f', 'fence', { agent: 'b', term: 3, member: 2 }),
      op('c', 'catchUp', { agent: 'c', member: 3, position: '0-1-9', timeout_ms: 5000 }),
      op('p', 'patch', {}),
      op('x', 'fence', { agent: 'z', term: 3, member: 2 }),
    ];
    const sent = (agent: string) => agentContent(agent, [db()], spread, pending).operations;
    expect(sent('a').map((o) => o.operationId)).toEqual(['p']);
    expect(sent('b')).toEqual([{ operationId: 'f', databaseId: 5, fence: { term: 3, member: 2 } }]);
    expect(sent('c')).toEqual([{ operationId: 'c', databaseId: 5, catchUp: { member: 3, position: '0-1-9', timeoutMs: 5000 } }]);
    // An agent holding no member of the database is sent nothing, even when addressed.
    expect(sent('z')).toEqual([]);
  });

  it('sends a rollout\'s member restart to the member\'s agent only, and the rollout itself to no agent', () => {
    const op = (id: string, kind: OperationRecord['kind'], payload: Record<string, unknown>): OperationRecord => ({ id, databaseId: 5, kind, payload, eventId: null, state: 'pending', error: null, created: 1 });
    const pending = [op('r', 'rollout', {}), op('m', 'restartMember', { agent: 'b', member: 2 })];
    const sent = (agent: string) => agentContent(agent, [db()], spread, pending).operations;
    expect(sent('a')).toEqual([]);
    expect(sent('b')).toEqual([{ operationId: 'm', databaseId: 5, restartMember: { member: 2 } }]);
    expect(sent('c')).toEqual([]);
  });
});

/**
 * A fork built from the shared object store on an agent that does not run its source gets the
 * source's backup key (docs/databases.md, "Fork to a point in time"), and no other agent does.
 */
describe('the source key of a fork from the shared store', () => {
  const base = {
    region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11', version: '10.11', image: '', binary: '/b', clusterSize: 1,
    replicationType: 'none', encrypted: false, sslConnection: true, allowList: [], status: 'active', hostPrimary: '', hostSecondary: '', port: 3306,
    members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: {}, rootPassword: 'pw', nextPassword: null, generation: 1,
    convergedGeneration: 1, runState: 'running', term: 1, primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null,
    lastError: null, created: 0, updated: 0, updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null, pending: [] },
  };
  const source = { ...base, id: 1, label: 'src', agentId: 'a', provisioned: true, backupKey: 'k'.repeat(64) } as unknown as DatabaseRecord;
  const fork = (over: Partial<DatabaseRecord>) => ({ ...base, id: 2, label: 'fork', agentId: 'b', provisioned: false, fork: { source: 1, restoreTimeMs: 5000 }, ...over }) as unknown as DatabaseRecord;
  const keyOf = (agent: string, dbs: DatabaseRecord[]) => agentContent(agent, dbs, [], []).databases.find((d) => d.id === 2)?.forkSourceKey ?? '';

  it('is sent to the fork\'s agent while the fork is being built, never to the source\'s agent', () => {
    expect(keyOf('b', [source, fork({})])).toBe('k'.repeat(64));
    expect(agentContent('a', [source, fork({})], [], []).databases.map((d) => [d.id, d.forkSourceKey ?? ''])).toEqual([[1, '']]);
  });

  it('is not sent once the fork is provisioned, to a fork on the source\'s agent, or when the control plane has no key', () => {
    expect(keyOf('b', [source, fork({ provisioned: true })])).toBe('');
    expect(keyOf('a', [source, fork({ agentId: 'a' })])).toBe('');
    expect(keyOf('b', [{ ...source, backupKey: null }, fork({})])).toBe('');
  });
});

/**
 * A 1-node database rebuilt from the shared store after its host was lost (docs/multi-host.md, "A
 * 1-node database on a lost host"): its new agent is told to recover it from its own objects with
 * its own key until the recovery ends, and a 1-node database's CA goes with it, without the
 * replication password.
 */
describe('a 1-node database under recovery', () => {
  const secrets = { caCertPem: 'CA PEM', caKeyPem: 'CA KEY', replPassword: 'repl' };
  const single = (over: Partial<DatabaseRecord>) => ({
    id: 7, label: 'one', region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/10.11', version: '10.11', image: '', binary: '/b', clusterSize: 1,
    replicationType: 'none', encrypted: false, sslConnection: true, allowList: [], status: 'degraded', hostPrimary: '198.18.1.2', hostSecondary: '198.18.1.3', port: 3306,
    provisioned: true, members: {}, caCert: null, usedDiskMb: null, patchPending: false, engineConfig: {}, rootPassword: 'pw', nextPassword: null, generation: 2,
    convergedGeneration: 1, runState: 'running', agentId: 'n', term: 1, primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null,
    lastError: null, created: 0, updated: 0, clusterSecrets: secrets, backupKey: 'k'.repeat(43),
    updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null, pending: [] }, ...over,
  }) as unknown as DatabaseRecord;
  const on = (agent: string): MemberPlacement[] => [{ databaseId: 7, member: 1, agentId: agent }];

  it('is sent to its new agent as a recovery from its own objects, with its key, its CA and its linroot password', () => {
    const [d] = agentContent('n', [single({ recovery: { from: 'old', lostMs: 1, placedMs: 2 } })], on('n'), []).databases;
    expect([Number(d!.forkSource), Number(d!.forkRestoreMs), d!.forkSourceKey, d!.recoverFromStore]).toEqual([7, 0, 'k'.repeat(43), true]);
    expect([d!.rootPassword, d!.hostPrimary, d!.clusterCaPem, d!.clusterCaKeyPem, d!.replicationPassword ?? '']).toEqual(['pw', '198.18.1.2', 'CA PEM', 'CA KEY', '']);
  });

  it('is an ordinary database once the recovery ended, or before it is placed', () => {
    for (const recovery of [null, { from: 'old', lostMs: 1 }]) {
      const [d] = agentContent('n', [single({ recovery })], on('n'), []).databases;
      expect([Number(d!.forkSource), d!.forkSourceKey ?? '', d!.recoverFromStore ?? false]).toEqual([0, '', false]);
    }
  });
});
