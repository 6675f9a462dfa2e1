import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { Switchover } from '../../../control-plane/domain/databases/switchover.js';
import { Rollout, WINDOW_PATCH_GAP_MS } from '../../../control-plane/domain/databases/rollout.js';
import { refuseSuspendWhileMoving } from '../../../control-plane/domain/databases/placement.js';
import { RESUME_GRACE_MS, resumeGrace } from '../../../control-plane/domain/databases/resume-grace.js';
import { FailoverCoordinator } from '../../../control-plane/domain/databases/failover-coordinator.js';
import { AGENT_SILENT_MS, FAILOVER_AFTER_MS } from '../../../control-plane/domain/databases/failover-decision.js';
import { createRegistry } from '../../../lib/metrics.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';
import { playSpreadAgents } from './spread-agents.js';

/**
 * The control plane's part of patch, suspend and resume of a cluster spread over three agents
 * (docs/multi-host.md, "Patch, suspend and resume across hosts") over the real SQLite store with a
 * ManualClock (2024-01-01 00:00 UTC, a Monday): the maintenance window's patch started by the lease
 * holder's rollout round, the suspend's refusal, and the failover coordinator around a suspend and
 * a resume. The agents are played as in rollout.test.ts: each answers the operations addressed to
 * it and reports its member.
 */
describe('patch, suspend and resume across hosts: the control plane (SQLite store, manual clock)', () => {
  const store = useSqliteStore('patch-rollout');

  async function setup(dayOfWeek: number) {
    const opened = store.open();
    const { clock, repo, events } = opened;
    const row = await repo.create(databaseRecord({
      label: 'spread', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
      provisioned: true, convergedGeneration: 1, agentId: 'a', term: 4, patchPending: true,
      updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: dayOfWeek, week_of_month: null },
    }));
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    const switchover = new Switchover({ repo, events, clock, logger: silentLogger(), onChange: () => undefined });
    const rollout = new Rollout({ repo, events, clock, logger: silentLogger(), switchover, onChange: () => undefined });
    const agents = await playSpreadAgents(opened, row.id, () => rollout.tick());
    const { seen } = agents;
    /** The lease holder's rounds while the agents answer every operation, until `until` holds. */
    const rounds = (turns: number, until: () => Promise<boolean>) => agents.rounds(turns, () => true, until);
    const rollouts = async () => (await repo.pendingOperations(row.id)).filter((op) => op.kind === 'rollout');
    return { clock, repo, events, row, rollout, rounds, seen, rollouts };
  }

  it('starts no patch outside the window', async () => {
    // Sunday's window: closed on a Monday at 00:00.
    const { repo, row, rollout, rollouts } = await setup(7);
    await Promise.all(await rollout.tick());
    expect(await rollouts()).toEqual([]);
    expect((await repo.get(row.id))!.status).toBe('active');
  });

  it('in the window, patches member by member as a rollout marked patch, then ends active with the event finished; not again in the same window', async () => {
    const { clock, repo, events, row, rollout, rounds, seen, rollouts } = await setup(1);
    // Not awaited: the step it starts waits on the manual clock, which the rounds move.
    void Promise.all(await rollout.tick());
    const [op] = await rollouts();
    expect(op?.payload).toEqual({ patch: true });
    const db = (await repo.get(row.id))!;
    expect(db.status).toBe('updating');
    expect(await events.get(db.pendingEventId!)).toMatchObject({ action: 'database_update', message: 'Patch applied in the maintenance window' });
    await rounds(400, async () => (await repo.operation(op!.id))?.state === 'done');
    // Each member restarted once, replicas first, each step a patch (restart even an unchanged spec).
    expect(seen.map((o) => [o.kind, o.payload])).toEqual([
      ['restartMember', { agent: 'b', member: 2, patch: true }],
      ['restartMember', { agent: 'c', member: 3, patch: true }],
      ['fence', { agent: 'a', term: 4, member: 1 }],
      ['catchUp', { agent: 'b', member: 2, position: '0-1-10', timeout_ms: 5000 }],
      ['restartMember', { agent: 'a', member: 1, patch: true }],
    ]);
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', primaryMember: 2, term: 5, pendingEventId: null });
    expect((await events.get(db.pendingEventId!))!.status).toBe('finished');
    // Still in the window, and the stored report still says a build waits: not patched again.
    clock.advance(60_000);
    await Promise.all(await rollout.tick());
    expect(await rollouts()).toEqual([]);
    expect((await repo.get(row.id))!.status).toBe('active');
    expect(WINDOW_PATCH_GAP_MS).toBeGreaterThanOrEqual(4 * 3_600_000);
  });

  it('refuses the suspend of a spread cluster with a member on a lost, draining or missing host', async () => {
    const { clock, repo, row } = await setup(7);
    await expect(refuseSuspendWhileMoving(repo, row.id)).resolves.toBeUndefined();
    await repo.setAgentLost('b', clock.now());
    await expect(refuseSuspendWhileMoving(repo, row.id)).rejects.toMatchObject({ code: 'conflict', message: expect.stringContaining('from agent b: lost, draining or seeding') });
    await repo.setAgentLost('b', null);
    await repo.setAgentDraining('c', clock.now());
    await expect(refuseSuspendWhileMoving(repo, row.id)).rejects.toMatchObject({ code: 'conflict', message: expect.stringContaining('from agent c:') });
    await repo.setAgentDraining('c', null);
    await expect(refuseSuspendWhileMoving(repo, row.id)).resolves.toBeUndefined();
    await repo.placeMember(row.id, 2, '');
    await expect(refuseSuspendWhileMoving(repo, row.id)).rejects.toMatchObject({ message: expect.stringContaining('agent none') });
  });

  it('gives a resumed cluster RESUME_GRACE_MS before its primary counts as lost', () => {
    expect(resumeGrace({ status: 'resuming', updated: 1_000 }, 1_000 + RESUME_GRACE_MS - 1)).toBe(true);
    expect(resumeGrace({ status: 'resuming', updated: 1_000 }, 1_000 + RESUME_GRACE_MS)).toBe(false);
    expect(resumeGrace({ status: 'active', updated: 1_000 }, 1_000)).toBe(false);
  });

  it('promotes nothing while suspended nor in the resume grace; a primary still down after it is replaced by the usual rule', async () => {
    const { clock, repo, events, row } = await setup(7);
    const coord = new FailoverCoordinator({ repo, events, clock, logger: silentLogger(), registry: createRegistry('control-plane') });
    /** The agents report: the primary's member stopped, the replicas as `replicas` says. */
    const report = async (replicas: string) => {
      for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) {
        await repo.upsertAgent({ id: agent, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
        await coord.record(agent, [{ id: row.id, nodes: [{ member: k, state: k === 1 ? 'stopped' : replicas, role: k === 1 ? 'primary' : 'replica', gtid: `0-1-${10 + k}`, address: `10.0.0.${k}:3306` }] }]);
      }
    };
    clock.advance(AGENT_SILENT_MS);
    await repo.update(row.id, { runState: 'suspended', status: 'suspended', updated: clock.now() });
    for (let t = 0; t < 4 * FAILOVER_AFTER_MS; t += 500) {
      await report('stopped');
      await coord.tick();
      clock.advance(500);
    }
    expect((await repo.get(row.id))!).toMatchObject({ term: 4, primaryMember: 1 });
    // Resumed: the replicas' hosts started theirs first; the primary's is slower.
    await repo.update(row.id, { runState: 'running', status: 'resuming', updated: clock.now() });
    for (let t = 0; t < RESUME_GRACE_MS - 1000; t += 500) {
      await report('running');
      await coord.tick();
      clock.advance(500);
    }
    expect((await repo.get(row.id))!).toMatchObject({ term: 4, primaryMember: 1 });
    // Past the grace, the primary that never started is lost: the most advanced replica takes over.
    for (let t = 0; t < 1000 + 2 * FAILOVER_AFTER_MS; t += 500) {
      await report('running');
      await coord.tick();
      clock.advance(500);
    }
    expect((await repo.get(row.id))!).toMatchObject({ term: 5, primaryMember: 3, agentId: 'c' });
  });
});
