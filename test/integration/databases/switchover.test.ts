import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { HostHealing } from '../../../control-plane/domain/databases/host-healing.js';
import { HostDrain, SWITCHOVER_RETRY_MS } from '../../../control-plane/domain/databases/host-drain.js';
import { SWITCHOVER_DEADLINE_MS, Switchover, type SwitchoverOutcome } from '../../../control-plane/domain/databases/switchover.js';
import { SingleMove } from '../../../control-plane/domain/databases/single-move.js';
import type { OperationRecord } from '../../../control-plane/domain/databases/model.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const spread = databaseRecord({
  label: 'spread', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2',
  provisioned: true, convergedGeneration: 1, agentId: 'a',
});

/**
 * The planned switchover and the drain over the real SQLite store, driven by a ManualClock; the
 * agents' answers are written as the observer writes them (finishOperation with the output).
 */
describe('planned switchover and host drain (SQLite store, manual clock)', () => {
  const store = useSqliteStore('switch');

  async function setup() {
    const { clock, repo, events } = store.open();
    const row = await repo.create(spread);
    await repo.update(row.id, { term: 4 });
    await repo.setMembers(row.id, ['a', 'b', 'c']);
    for (const [k, agent] of [[1, 'a'], [2, 'b'], [3, 'c'], [0, 'd']] as const) {
      await repo.upsertAgent({ id: agent, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
      if (k > 0) await repo.putMemberReport({ databaseId: row.id, member: k, agentId: agent, state: 'running', role: k === 1 ? 'primary' : 'replica', gtid: `0-1-${10 + k}`, address: `10.0.0.${k}:3306`, reported: clock.now() });
    }
    let pushes = 0;
    const switchover = new Switchover({ repo, events, clock, logger: silentLogger(), onChange: () => pushes++ });
    const healing = new HostHealing({ repo, events, clock, logger: silentLogger(), revoke: async () => undefined, removed: async () => false });
    const move = new SingleMove({ repo, events, clock, logger: silentLogger(), onChange: () => pushes++ });
    const drain = new HostDrain({ repo, events, clock, logger: silentLogger(), healing, switchover, move });
    const seen: OperationRecord[] = [];
    /**
     * Runs `p` while playing the agents: each new pending operation is seen once and answered by
     * `answer` (undefined: no answer), and the clock moves 25 ms per turn.
     */
    async function drive(p: Promise<SwitchoverOutcome>, answer: (op: OperationRecord) => { ok: boolean; output?: string; error?: string } | undefined): Promise<SwitchoverOutcome> {
      let out: SwitchoverOutcome | undefined;
      void p.then((o) => (out = o));
      for (let turn = 0; turn < 2000 && !out; turn++) {
        for (const op of await repo.pendingOperations(row.id)) {
          if (seen.some((s) => s.id === op.id)) continue;
          seen.push(op);
          const a = answer(op);
          if (a) await repo.finishOperation(op.id, a.ok ? 'done' : 'failed', a.ok ? null : a.error ?? 'failed', a.output ?? null);
        }
        await new Promise((r) => setImmediate(r));
        clock.advance(25);
      }
      if (!out) throw new Error('the switchover did not end');
      return out;
    }
    const messages = async () => (await events.list()).map((e) => `${e.action}/${e.status}: ${e.message}`);
    return { clock, repo, row, switchover, drain, drive, seen, messages, pushes: () => pushes };
  }

  it('fences the primary, has the target catch up to the fenced position, then names it in a new term', async () => {
    const { repo, row, switchover, drive, seen, messages, pushes } = await setup();
    const out = await drive(switchover.run(row.id, { member: 2, agentId: 'b' }, 'a test'), (op) => (op.kind === 'fence' ? { ok: true, output: '0-1-42' } : { ok: true }));
    expect(out).toMatchObject({ kind: 'switched', term: 5, member: 2, agentId: 'b' });
    expect(seen.map((op) => [op.kind, op.payload])).toEqual([
      ['fence', { agent: 'a', term: 4, member: 1 }],
      ['catchUp', { agent: 'b', member: 2, position: '0-1-42', timeout_ms: 5000 }],
    ]);
    expect(await repo.get(row.id)).toMatchObject({ term: 5, primaryMember: 2, agentId: 'b' });
    expect(pushes()).toBeGreaterThanOrEqual(3);
    const said = await messages();
    expect(said.some((m) => /^database_failover\/notification: Member 2 on agent b named primary \(term 5\) by a planned switchover \(a test\)/.test(m))).toBe(true);
  });

  it('is abandoned when the fence is not answered in time: the term is raised with the same primary and that fence named lifted', async () => {
    const { repo, row, switchover, drive, seen, messages } = await setup();
    const out = await drive(switchover.run(row.id, { member: 2, agentId: 'b' }, 'a test'), () => undefined);
    expect(out.kind).toBe('abandoned');
    expect(seen.map((op) => op.kind)).toEqual(['fence']);
    expect((await repo.operation(seen[0]!.id))).toMatchObject({ state: 'failed' });
    // The explicit word the fenced member's agent waits for: a higher term alone keeps the fence.
    expect(await repo.get(row.id)).toMatchObject({ term: 5, primaryMember: 1, agentId: 'a', fenceLiftedTerm: 4 });
    expect((await messages()).some((m) => m.startsWith('database_update/failed: Planned switchover abandoned') && m.includes(`within ${SWITCHOVER_DEADLINE_MS / 1000} s`))).toBe(true);
  });

  it('is abandoned when the target cannot catch up, and names nobody when a failover changed the cluster meanwhile', async () => {
    const s = await setup();
    const out = await s.drive(s.switchover.run(s.row.id, { member: 2, agentId: 'b' }, 'a test'), (op) => (op.kind === 'fence' ? { ok: true, output: '0-1-42' } : { ok: false, error: 'did not apply 0-1-42 within 5 s' }));
    expect(out).toMatchObject({ kind: 'abandoned' });
    expect(await s.repo.get(s.row.id)).toMatchObject({ term: 5, primaryMember: 1 });

    // A failover coordinator names member 3 (term 6) while the target catches up: nobody is named, the term stays.
    const again = await s.drive(s.switchover.run(s.row.id, { member: 2, agentId: 'b' }, 'a test'), (op) => {
      if (op.kind === 'fence') return { ok: true, output: '0-1-50' };
      void s.repo.update(s.row.id, { term: 6, primaryMember: 3, agentId: 'c' });
      return { ok: true };
    });
    expect(again).toMatchObject({ kind: 'abandoned', reason: expect.stringMatching(/changed during the switchover/) });
    expect(await s.repo.get(s.row.id)).toMatchObject({ term: 6, primaryMember: 3 });
  });

  it('does not fence the same primary again for a minute after an abandoned switchover of a drain', async () => {
    const { row, drain, drive, switchover, clock, repo } = await setup();
    await drain.drain('a');
    await drain.tick();
    expect(switchover.busy(row.id)).toBe(true);
    await drive(new Promise((ok) => {
      const wait = () => (switchover.busy(row.id) ? setImmediate(wait) : ok({ kind: 'abandoned', reason: 'done' }));
      wait();
    }), () => undefined);
    await new Promise((r) => setImmediate(r));
    expect(await repo.get(row.id)).toMatchObject({ term: 5, primaryMember: 1 });
    // The agents go on reporting: a target is there, but the drain waits.
    const reporting = async () => {
      for (const id of ['a', 'b', 'c', 'd']) await repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
    };
    await reporting();
    await drain.tick();
    expect(switchover.busy(row.id)).toBe(false);
    clock.advance(SWITCHOVER_RETRY_MS);
    await reporting();
    await drain.tick();
    expect(switchover.busy(row.id)).toBe(true);
  });

  it('drains a host: refused without room, then the replica moves first, then the primary is switched over and moves', async () => {
    const { repo, row, drain, drive, switchover, clock } = await setup();
    // Agent d is the only free host: draining two hosts at once leaves the second nowhere to go.
    expect((await drain.drain('a')).draining).toBe(true);
    await expect(drain.drain('b')).rejects.toThrow(/Agent b cannot be drained: database \d+ \(spread\) has no other host to go to/);
    expect((await repo.agent('b'))!.drainingAt).toBeNull();
    await expect(drain.drain('nobody')).rejects.toMatchObject({ code: 'not_found' });
    await expect(drain.drain('../x')).rejects.toMatchObject({ code: 'validation' });
    expect((await drain.views()).get('a')).toMatchObject({ draining: true, membersLeft: 1 });

    // The primary is on a: the round switches it over to the most advanced replica (member 3), and
    // the new term is named once the agents answer.
    await drain.tick();
    expect(switchover.busy(row.id)).toBe(true);
    await drive(new Promise((ok) => {
      const wait = () => (switchover.busy(row.id) ? setImmediate(wait) : ok({ kind: 'abandoned', reason: 'done' }));
      wait();
    }), (op) => (op.kind === 'fence' ? { ok: true, output: '0-1-42' } : { ok: true }));
    expect(await repo.get(row.id)).toMatchObject({ term: 5, primaryMember: 3, agentId: 'c' });

    // The old primary is a replica now (its agent says so): it moves to d, the free host.
    await repo.putMemberReport({ databaseId: row.id, member: 1, agentId: 'a', state: 'running', role: 'replica', gtid: '0-1-42', address: '10.0.0.1:3306', reported: clock.now() });
    await repo.putMemberReport({ databaseId: row.id, member: 3, agentId: 'c', state: 'running', role: 'primary', gtid: '0-1-42', address: '10.0.0.3:3306', reported: clock.now() });
    expect(await drain.tick()).toBe(true);
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['d', 'b', 'c']);
    expect((await drain.views()).get('a')).toMatchObject({ draining: true, membersLeft: 0 });
    // Nothing goes back to a while it drains; undrained, it takes members again.
    expect((await drain.undrain('a')).draining).toBe(false);
  });
});
