import { describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { MOVE_FENCE_DEADLINE_MS, SingleMove, type MoveOutcome } from '../../../control-plane/domain/databases/single-move.js';
import type { OperationRecord } from '../../../control-plane/domain/databases/model.js';
import { agentContent } from '../../../control-plane/push/agent-desired.js';
import { databaseRecord } from '../../helpers/database-record.js';
import { useSqliteStore } from '../../helpers/sqlite-store.js';

const single = databaseRecord({
  label: 'one', clusterSize: 1, status: 'active', hostPrimary: '127.79.0.1', provisioned: true, convergedGeneration: 1, agentId: 'a', backupKey: 'a2V5',
});

/**
 * The move of a 1-node database off a draining host over the real SQLite store, driven by a
 * ManualClock; the agent's answer to the fence is written as the observer writes it.
 */
describe('moving a 1-node database to another host (SQLite store, manual clock)', () => {
  const store = useSqliteStore('move');

  async function setup() {
    const { clock, repo, events } = store.open();
    const row = await repo.create(single);
    await repo.update(row.id, { term: 2 });
    await repo.setMembers(row.id, ['a']);
    let pushes = 0;
    const move = new SingleMove({ repo, events, clock, logger: silentLogger(), onChange: () => pushes++ });
    const seen: OperationRecord[] = [];
    async function drive(p: Promise<MoveOutcome>, answer: (op: OperationRecord) => { ok: boolean; output?: string; error?: string } | undefined): Promise<MoveOutcome> {
      let out: MoveOutcome | undefined;
      void p.then((o) => (out = o));
      for (let turn = 0; turn < 5000 && !out; turn++) {
        for (const op of await repo.pendingOperations(row.id)) {
          if (seen.some((s) => s.id === op.id)) continue;
          seen.push(op);
          // What the old agent is sent while the fence is pending: the fence, addressed to it.
          const term = (await repo.get(row.id))!.term;
          expect(agentContent('a', await repo.list(), await repo.members(), await repo.pendingOperations()).operations.map((o) => o.fence)).toEqual([{ term, member: 1 }]);
          const a = answer(op);
          if (a) await repo.finishOperation(op.id, a.ok ? 'done' : 'failed', a.ok ? null : a.error ?? 'failed', a.output ?? null);
        }
        await new Promise((r) => setImmediate(r));
        clock.advance(25);
      }
      if (!out) throw new Error('the move did not end');
      return out;
    }
    const messages = async () => (await events.list()).map((e) => `${e.action}/${e.status}: ${e.message}`);
    return { clock, repo, row, move, drive, seen, messages, pushes: () => pushes };
  }

  it('fences the node, then places the database on the target as a planned recovery from the store', async () => {
    const { repo, row, move, drive, seen, messages, pushes } = await setup();
    const out = await drive(move.run(row.id, 'a', 'b', 'a test'), () => ({ ok: true, output: '0-1-42' }));
    expect(out).toMatchObject({ kind: 'moved', agentId: 'b', position: '0-1-42' });
    expect(seen.map((op) => [op.kind, op.payload])).toEqual([['fence', { agent: 'a', term: 2, member: 1 }]]);
    const after = await repo.get(row.id);
    expect(after).toMatchObject({ agentId: 'b', primaryMember: 1, term: 2, status: 'degraded', recovery: { from: 'a', planned: true } });
    expect(after!.recovery!.placedMs).toBe(out.kind === 'moved' ? out.fencedMs : -1);
    expect((await repo.members(row.id)).map((m) => m.agentId)).toEqual(['b']);
    expect(pushes()).toBeGreaterThanOrEqual(2);
    // The target is sent a recovery from the store; the old agent is sent nothing of it.
    const b = agentContent('b', await repo.list(), await repo.members(), []);
    expect(b.databases.map((d) => [d.id, d.recoverFromStore, d.forkSource])).toEqual([[row.id, true, row.id]]);
    expect(agentContent('a', await repo.list(), await repo.members(), []).databases).toEqual([]);
    expect((await messages()).some((m) => m.startsWith('database_update/notification: Placed on agent b (a test): rebuilt there from the object store up to the fence\'s position 0-1-42'))).toBe(true);
  });

  it('is abandoned when the fence fails or is not answered in time: the term is raised and the database stays where it was', async () => {
    const s = await setup();
    const failed = await s.drive(s.move.run(s.row.id, 'a', 'b', 'a test'), () => ({ ok: false, error: 'the binlog archive round after the fence did not complete' }));
    expect(failed).toMatchObject({ kind: 'abandoned', reason: expect.stringMatching(/archive round after the fence did not complete/) });
    // The term raised names that fence (term 2's) abandoned: the agent lifts a move's fence only for this word.
    expect(await s.repo.get(s.row.id)).toMatchObject({ term: 3, fenceLiftedTerm: 2, agentId: 'a', recovery: null });
    expect((await s.repo.members(s.row.id)).map((m) => m.agentId)).toEqual(['a']);
    expect(agentContent('a', await s.repo.list(), await s.repo.members(), []).databases.map((d) => [d.term, d.fenceLiftedTerm])).toEqual([[3, 2]]);

    const silent = await s.drive(s.move.run(s.row.id, 'a', 'b', 'a test'), () => undefined);
    expect(silent.kind).toBe('abandoned');
    expect(await s.repo.operation(s.seen[1]!.id)).toMatchObject({ state: 'failed', error: `did not answer within ${MOVE_FENCE_DEADLINE_MS / 1000} s` });
    expect(await s.repo.get(s.row.id)).toMatchObject({ term: 4, fenceLiftedTerm: 3, agentId: 'a' });
    expect((await s.messages()).filter((m) => m.startsWith('database_update/failed: Move to another host abandoned'))).toHaveLength(2);
  });

  it('places nothing when the database changed during the fence (a delete, a resize to a cluster)', async () => {
    const s = await setup();
    const out = await s.drive(s.move.run(s.row.id, 'a', 'b', 'a test'), () => {
      void s.repo.update(s.row.id, { clusterSize: 3 });
      return { ok: true, output: '0-1-42' };
    });
    expect(out).toMatchObject({ kind: 'abandoned', reason: expect.stringMatching(/changed during the move/) });
    expect(await s.repo.get(s.row.id)).toMatchObject({ agentId: 'a', term: 3, recovery: null });
  });

  it('a delete during the fence abandons the move, and the old agent is told the database is deleted (not moved): it removes its objects in the store', async () => {
    const s = await setup();
    const out = await s.drive(s.move.run(s.row.id, 'a', 'b', 'a test'), () => {
      void s.repo.update(s.row.id, { deleting: true });
      return { ok: true, output: '0-1-42' };
    });
    expect(out).toMatchObject({ kind: 'abandoned', reason: expect.stringMatching(/changed during the move/) });
    const a = agentContent('a', await s.repo.list(), await s.repo.members(), []);
    expect([a.databases, a.deletedDatabases]).toEqual([[], [s.row.id]]);
    expect(agentContent('b', await s.repo.list(), await s.repo.members(), []).deletedDatabases).toEqual([]);
  });

  it('a delete after the move is told to the agent it moved to, not to the old one (which keeps the objects the new host owns)', async () => {
    const s = await setup();
    expect(await s.drive(s.move.run(s.row.id, 'a', 'b', 'a test'), () => ({ ok: true, output: '0-1-42' }))).toMatchObject({ kind: 'moved' });
    await s.repo.update(s.row.id, { deleting: true });
    expect(agentContent('a', await s.repo.list(), await s.repo.members(), []).deletedDatabases).toEqual([]);
    expect(agentContent('b', await s.repo.list(), await s.repo.members(), []).deletedDatabases).toEqual([s.row.id]);
  });
});
