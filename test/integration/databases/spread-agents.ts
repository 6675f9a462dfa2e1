import type { OperationRecord } from '../../../control-plane/domain/databases/model.js';
import type { SqliteStore } from '../../helpers/sqlite-store.js';

/**
 * The three agents of a cluster spread over agents a, b and c (members 1, 2, 3), played for the
 * control plane's rolling changes (rollout.test.ts, patch-rollout.test.ts): each agent stays
 * connected, answers the operations addressed to it, and reports its member as the observer
 * stores it, following the primary the control plane names.
 */
export interface SpreadAgents {
  /** Stores member k's report (at gtid 0-1-10). */
  report(k: number, role: string): Promise<void>;
  /** Every agent seen connected now. */
  reporting(): Promise<void>;
  /** The operations answered so far, in order. */
  seen: OperationRecord[];
  /**
   * The lease holder's rounds (`tick`) while the agents answer: each new operation is seen once
   * and answered by `answer` (false: it fails with `failure`), the clock moving 50 ms a turn,
   * until `until` holds, for at most `turns`.
   */
  rounds(turns: number, answer: (op: OperationRecord) => boolean, until: () => Promise<boolean>): Promise<void>;
}

/** Members 1-3 reported (1 the primary) and the agents connected; `tick` runs one round of the lease holder. */
export async function playSpreadAgents(store: SqliteStore, databaseId: number, tick: () => Promise<Promise<unknown>[]>, failure = 'the step failed'): Promise<SpreadAgents> {
  const { clock, repo } = store;
  const agentOf: Record<number, string> = { 1: 'a', 2: 'b', 3: 'c' };
  const report = async (k: number, role: string) => {
    await repo.putMemberReport({ databaseId, member: k, agentId: agentOf[k]!, state: 'running', role, gtid: '0-1-10', address: `10.0.0.${k}:3306`, reported: clock.now() });
  };
  const reporting = async () => {
    for (const id of ['a', 'b', 'c']) await repo.upsertAgent({ id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: clock.now(), appliedVersion: 1, engines: [] });
  };
  await reporting();
  for (const k of [1, 2, 3]) await report(k, k === 1 ? 'primary' : 'replica');
  const seen: OperationRecord[] = [];
  async function rounds(turns: number, answer: (op: OperationRecord) => boolean, until: () => Promise<boolean>): Promise<void> {
    for (let turn = 0; turn < turns; turn++) {
      if (await until()) return;
      await reporting();
      // Not awaited: a step waits on the manual clock, which the turns move.
      void Promise.all(await tick());
      for (const op of await repo.pendingOperations(databaseId)) {
        if (op.kind === 'rollout' || seen.some((s) => s.id === op.id)) continue;
        seen.push(op);
        if (!answer(op)) {
          await repo.finishOperation(op.id, 'failed', failure);
          continue;
        }
        if (op.kind === 'fence') {
          await report(Number(op.payload.member), 'fenced');
          await repo.finishOperation(op.id, 'done', null, '0-1-10');
        } else {
          await repo.finishOperation(op.id, 'done', null);
        }
      }
      // The agents follow the named primary: it promotes, the old one rejoins as a replica.
      const now = (await repo.get(databaseId))!;
      for (const k of [1, 2, 3]) {
        const mine = (await repo.memberReports(databaseId)).find((r) => r.member === k)!;
        const role = k === now.primaryMember ? 'primary' : 'replica';
        if (mine.role !== role) await report(k, role);
      }
      await new Promise((r) => setImmediate(r));
      clock.advance(50);
    }
    throw new Error(`the rollout did not get there: ${JSON.stringify(seen.map((o) => [o.kind, o.payload]))} ${JSON.stringify(await repo.get(databaseId))}`);
  }
  return { report, reporting, seen, rounds };
}
