import { afterEach, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { databaseRecord } from '../../helpers/database-record.js';

const MYSQL = '/v4/databases/mysql/instances';

/**
 * A drain and a rolling change of the same spread cluster are refused up front, each while the
 * other is under way, through the API of an in-process control plane. The store is written
 * directly (agents, placements, a drain or a rollout in progress): what is checked is the answer.
 */
describe('a drain and a rolling change of one database exclude each other (API)', () => {
  let api: ApiHarness;
  afterEach(async () => api?.close());

  async function setup() {
    api = await startApi();
    const repo = api.cp.context.store.databases;
    const now = api.cp.context.clock.now();
    // d is free: without the rolling change, a drain of a, b or c would be accepted.
    for (const id of ['a', 'b', 'c', 'd']) {
      await repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: now, appliedVersion: 1, engines: [] });
    }
    const row = await repo.create(databaseRecord({
      label: 'spread', type: 'g6-standard-1', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.93.0.1', hostSecondary: '127.93.0.2',
      provisioned: true, convergedGeneration: 1, agentId: 'a', term: 2,
    }));
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    return { repo, row };
  }

  it('refuses a resize while a host holding a member is being drained, naming the host', async () => {
    const { repo, row } = await setup();
    await repo.setAgentDraining('b', api.cp.context.clock.now());
    const r = await api.req('PUT', `${MYSQL}/${row.id}`, { body: { type: 'g6-standard-2' } });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([{ reason: 'Your database has a member on a host being drained (agent b); a change that restarts its members can be made once the drain is done.' }]);
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', type: 'g6-standard-1', pendingEventId: null });
    expect((await repo.pendingOperations(row.id)).filter((op) => op.kind === 'rollout')).toEqual([]);
  });

  it('refuses to drain a host while a rolling change runs on a database with a member on it', async () => {
    const { repo, row } = await setup();
    await repo.createOperation({ id: 'rollout-x', databaseId: row.id, kind: 'rollout', payload: {}, eventId: null, state: 'pending', error: null, created: api.cp.context.clock.now() });
    const r = await api.req('POST', `/v4/fulcrum/agents/c/drain`, { body: {} });
    expect(r.status).toBe(400);
    expect(r.body.errors).toEqual([{
      reason: `Agent c cannot be drained: database ${row.id} (spread) has a rolling change under way (a resize, version upgrade or engine_config change restarting its members one by one); drain the host once it is done.`,
    }]);
    expect((await repo.agent('c'))!.drainingAt).toBeNull();
  });
});
