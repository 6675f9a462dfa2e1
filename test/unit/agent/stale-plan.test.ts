import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { newDbState } from '../../../agent/database/state.js';
import type { Action, DbObs } from '../../../agent/database/plan.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { restartPrimary, type PrimaryContext } from '../../../agent/database/failover.js';
import { untilReplicating } from '../../../agent/database/rolling.js';
import type { NodeObs } from '../../../agent/database/plan.js';

/**
 * A plan made from an observation is dropped when an operation ran in between (docs/agent.md §5):
 * a planned switchover's fence makes the primary read-only, and a promote planned from an
 * observation taken just before it must not make it writable again (writes after the fenced
 * position would be acknowledged on a primary that is about to be replaced).
 */
describe('a round whose plan went stale', () => {
  let dir = '';
  afterEach(() => rmSync(dir, { recursive: true, force: true }));

  it('does not run a plan made before an operation that ran during its observation', async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-stale-'));
    const c = new DatabaseController({
      id: 4, agentId: 'a', agentKey: 'abcdef', stateDir: dir, runtime: {} as ContainerRuntime, runtimeKind: 'process', catalogue: [],
      logger: silentLogger(), clock: new ManualClock(0), nodeAddressPool: '198.18.0.0/29', takenAddresses: () => new Set(), onChange: () => undefined,
    });
    c.state = { ...newDbState(4), addresses: ['198.18.0.1'], primary: 1, provisioned: true };
    c.desired = { id: 4, clusterSize: 1, state: 'running', members: [] } as unknown as DesiredDatabase__Output;
    // The observation a round plans on: a read-only primary, which the plan promotes.
    const obs: DbObs = {
      known: true, provisioned: true, clusterSize: 1, primary: 1, rebuild: [], accountsCurrent: true, proxiesCurrent: true, suspended: false,
      patchPending: false, patchRequested: false, windowOpen: false, primaryDownCount: 0,
      nodes: [{ index: 1, state: 'running', specCurrent: true, reachable: true, readOnly: true, replicating: false }],
    };
    let observed!: () => void;
    const ran: Action[] = [];
    Object.assign(c, {
      observe: () => new Promise<DbObs>((resolve) => (observed = () => resolve(obs))),
      execute: async (a: Action) => void ran.push(a),
    });
    const round = c.tick();
    await new Promise((r) => setImmediate(r));
    // A fence runs to its end while the round observes.
    await c.runExclusive('switchover', async () => undefined);
    observed();
    await round;
    expect(ran).toEqual([]);
    // The next round plans afresh and acts.
    Object.assign(c, { observe: async () => obs });
    await c.tick();
    expect(ran).toEqual([{ kind: 'promote-primary' }]);
  });
});

describe('a primary fenced for a planned switchover that is restarted', () => {
  const context = (fencedTerm: number | undefined) => {
    const calls: string[] = [];
    const db = {
      state: { ...newDbState(4), primary: 1, term: 5, fencedTerm },
      semiSync: true,
      runtime: { ensure: async () => void calls.push('ensure') } as unknown as ContainerRuntime,
      nodeName: () => 'n1',
      nodeSpec: () => ({}) as ReturnType<PrimaryContext['nodeSpec']>,
      ensureTls: async () => undefined,
      adminTarget: async () => {
        calls.push('promote');
        throw new Error('promoted');
      },
    } as unknown as PrimaryContext;
    return { db, calls };
  };

  it('comes back read-only (it is not promoted) while its fence holds; otherwise it is promoted', async () => {
    const fenced = context(5);
    await restartPrimary(fenced.db);
    expect(fenced.calls).toEqual(['ensure']);
    // A fence of an older term still holds (only the control plane's word lifts it).
    const older = context(4);
    await restartPrimary(older.db);
    expect(older.calls).toEqual(['ensure']);
    const lifted = context(undefined);
    await expect(restartPrimary(lifted.db)).rejects.toThrow('promoted');
    expect(lifted.calls).toEqual(['ensure', 'promote']);
  });
});

describe('a member restarted for a rolling change across hosts', () => {
  it('waits until it was observed a read-only replica replicating from the named primary', async () => {
    const seen: NodeObs[] = [
      { index: 1, state: 'running', specCurrent: false, reachable: true, readOnly: false, replicating: false },
      { index: 1, state: 'running', specCurrent: false, reachable: true, readOnly: true, replicating: false },
      { index: 1, state: 'running', specCurrent: false, reachable: true, readOnly: true, replicating: true },
    ];
    let calls = 0;
    // An old primary just switched over: written, then read-only, then replicating once its rejoin ran.
    await untilReplicating(() => seen[Math.min(calls++, seen.length - 1)], () => true, 1);
    expect(calls).toBe(3);
    // Replicating, but the agent names it primary again (a newer term): not until it is a replica.
    let primaryChecks = 0;
    await untilReplicating(() => seen[2], () => primaryChecks++ >= 2, 1);
    expect(primaryChecks).toBe(3);
  });
});
