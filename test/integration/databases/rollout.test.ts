import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { eventToWire } from '../../../control-plane/domain/events/event-service.js';
import { Switchover } from '../../../control-plane/domain/databases/switchover.js';
import { ROLLOUT_ATTEMPTS, ROLLOUT_RETRY_MS, Rollout } from '../../../control-plane/domain/databases/rollout.js';
import { DatabaseObserver } from '../../../control-plane/domain/databases/observer.js';
import type { DatabaseService } from '../../../control-plane/domain/databases/database-service.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';
import { playSpreadAgents } from './spread-agents.js';

/**
 * A rolling change of a cluster spread over three agents, run by the lease holder's rollout over
 * the real SQLite store with a ManualClock. The agents are played here: each answers the
 * operations addressed to it as its agent would, and reports its member as the observer stores it.
 */
describe('rolling change across hosts (SQLite store, manual clock)', () => {
  const store = useSqliteStore('rollout');

  async function setup() {
    const opened = store.open();
    const { clock, repo, events } = opened;
    const resize = await events.record('database_resize', { id: 0, type: 'database', label: 'spread', url: '' });
    const row = await repo.create(databaseRecord({
      label: 'spread', clusterSize: 3, replicationType: 'semi_synch', status: 'resizing', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
      provisioned: true, convergedGeneration: 1, agentId: 'a', term: 4, pendingEventId: resize.id,
    }));
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    await repo.createOperation({ id: 'rollout-1', databaseId: row.id, kind: 'rollout', payload: {}, eventId: null, state: 'pending', error: null, created: clock.now() });
    const switchover = new Switchover({ repo, events, clock, logger: silentLogger(), onChange: () => undefined });
    const newRollout = () => new Rollout({ repo, events, clock, logger: silentLogger(), switchover, onChange: () => undefined });
    let rollout = newRollout();
    /** The control plane restarts: a new Rollout over the same store, with nothing in memory. */
    const restartControlPlane = () => {
      rollout = newRollout();
    };
    const { seen, rounds } = await playSpreadAgents(opened, row.id, () => rollout.tick(), 'mariadb-upgrade failed on node 2');
    const messages = async () => (await events.list()).map((e) => `${e.action}/${e.status}: ${e.message}`);
    const observer = new DatabaseObserver({ repo, events, service: {} as DatabaseService, clock, logger: silentLogger() });
    /** The reporting agent says the database is active and converged, as a spread member's agent does at once. */
    const converged = () => observer.apply('a', [{ id: row.id, status: 'active', members: {}, caCertPem: '', error: '', usedDiskMb: 0, convergedGeneration: 1, backups: [], events: [] }], []);
    return { clock, repo, events, row, rounds, seen, messages, converged, restartControlPlane };
  }

  it('restarts the replicas, switches over onto one, restarts the old primary, then ends the resize', async () => {
    const { repo, row, rounds, seen, messages, converged } = await setup();
    // The agents have nothing to do on their own: the rollout, not their report, ends the resize.
    await converged();
    expect((await repo.get(row.id))!.status).toBe('resizing');
    await rounds(2000, () => true, async () => (await repo.operation('rollout-1'))?.state === 'done');
    expect(seen.map((op) => [op.kind, op.payload])).toEqual([
      ['restartMember', { agent: 'b', member: 2 }],
      ['restartMember', { agent: 'c', member: 3 }],
      ['fence', { agent: 'a', term: 4, member: 1 }],
      ['catchUp', { agent: 'b', member: 2, position: '0-1-10', timeout_ms: 5000 }],
      ['restartMember', { agent: 'a', member: 1 }],
    ]);
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', term: 5, primaryMember: 2, agentId: 'b', pendingEventId: null });
    const said = await messages();
    expect(said.filter((m) => m.startsWith('database_update/notification: Rolling change: member'))).toHaveLength(3);
    expect(said.some((m) => m.startsWith('database_failover/notification: Member 2 on agent b named primary (term 5) by a planned switchover (a rolling change)'))).toBe(true);
    expect(said).toContain('database_update/notification: Rolling change done: every member runs the new spec.');
    expect(said.some((m) => m.startsWith('database_resize/finished'))).toBe(true);
  });

  it('stops on a failed restart with the database serving and an event saying why, and resumes after the retry time', async () => {
    const { clock, repo, row, rounds, seen, messages } = await setup();
    let fail = true;
    await rounds(200, (op) => !(fail && op.kind === 'restartMember'), async () => (await messages()).some((m) => m.startsWith('database_update/failed: Rolling change stopped')));
    expect((await messages()).find((m) => m.startsWith('database_update/failed'))).toBe(
      `database_update/failed: Rolling change stopped (failure 1 of ${ROLLOUT_ATTEMPTS}): member 2 on agent b was not restarted: mariadb-upgrade failed on node 2. The database keeps serving; the change is tried again in ${ROLLOUT_RETRY_MS / 1000} s.`,
    );
    expect(await repo.get(row.id)).toMatchObject({ status: 'resizing', term: 4, primaryMember: 1 });
    expect((await repo.operation('rollout-1'))!.state).toBe('pending');
    // Nothing more is tried before the retry time: no fence, no second restart.
    const tried = seen.length;
    await expect(rounds(Math.floor(ROLLOUT_RETRY_MS / 50) - 20, () => true, async () => seen.length > tried)).rejects.toThrow('did not get there');
    fail = false;
    clock.advance(1000);
    await rounds(2000, () => true, async () => (await repo.operation('rollout-1'))?.state === 'done');
    expect(seen.filter((op) => op.kind === 'restartMember').map((op) => op.payload.member)).toEqual([2, 2, 3, 1]);
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', primaryMember: 2 });
  });

  it('ends a rollout that keeps failing: the resize event reads failed saying which member on which agent and why, the database is active again and nothing more is tried', async () => {
    const { clock, repo, events, row, rounds, seen, messages } = await setup();
    const resizeEvent = (await repo.get(row.id))!.pendingEventId!;
    for (let failure = 1; failure <= ROLLOUT_ATTEMPTS; failure++) {
      await rounds(Math.floor(ROLLOUT_RETRY_MS / 50) + 2000, (op) => op.kind !== 'restartMember', async () => {
        // Each failure is kept in the rollout's payload; the last one ends the rollout.
        const op = (await repo.operation('rollout-1'))!;
        return op.state === 'failed' || Number(op.payload.failures ?? 0) >= failure;
      });
      // Straight to the retry time (the wait itself is shown by the test above).
      clock.advance(ROLLOUT_RETRY_MS);
    }
    const rolloutOp = await repo.operation('rollout-1');
    expect(rolloutOp).toMatchObject({ state: 'failed', error: 'member 2 on agent b was not restarted: mariadb-upgrade failed on node 2' });
    // What GET /v4/account/events shows for the resize clients poll by action and entity.
    const wire = eventToWire((await events.get(resizeEvent))!);
    expect(wire).toMatchObject({ action: 'database_resize', status: 'failed' });
    expect(wire.message).toBe(
      `Rolling change failed after ${ROLLOUT_ATTEMPTS} failures: member 2 on agent b was not restarted: mariadb-upgrade failed on node 2. The database keeps serving (no member runs the new spec yet); a new update rolls out again.`,
    );
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', pendingEventId: null, term: 4, primaryMember: 1 });
    expect((await messages()).filter((m) => m.startsWith('database_update/failed: Rolling change stopped'))).toHaveLength(ROLLOUT_ATTEMPTS - 1);
    // Bounded: long after the retry time, no member is restarted again.
    const tried = seen.length;
    clock.advance(ROLLOUT_RETRY_MS * 4);
    await expect(rounds(100, () => true, async () => seen.length > tried)).rejects.toThrow('did not get there');
  }, 120_000);

  it('a control-plane restart in the middle of a rollout resumes it: no member restarted twice, one switchover', async () => {
    const { repo, row, rounds, seen, restartControlPlane } = await setup();
    // Stop the first control plane right after the switchover, before the old primary's restart.
    await rounds(2000, () => true, async () => (await repo.get(row.id))!.primaryMember === 2);
    restartControlPlane();
    await rounds(2000, () => true, async () => (await repo.operation('rollout-1'))?.state === 'done');
    expect(seen.map((op) => [op.kind, op.payload.member])).toEqual([
      ['restartMember', 2], ['restartMember', 3], ['fence', 1], ['catchUp', 2], ['restartMember', 1],
    ]);
    expect(await repo.get(row.id)).toMatchObject({ status: 'active', term: 5, primaryMember: 2 });
  });
});
