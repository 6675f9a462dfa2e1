import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { namedPrimaryAhead, plan, promotionHeldBack, type DbObs, type NodeObs } from '../../../agent/database/plan.js';
import { rejoin, type RejoinContext } from '../../../agent/database/rejoin.js';
import { reportDatabase } from '../../../agent/database/report.js';
import type { NodeDetail } from '../../../agent/database/observe.js';
import { newDbState } from '../../../agent/database/state.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';

/**
 * An agent adopts a promotion only for the position the control plane named its node for: a node
 * wiped or rebuilt behind it (it was still following the old primary) is not made primary, is
 * reported "behind", and is never wiped while it is named primary for a newer term.
 */
const running3 = { clusterSize: 3, state: 'running' as const };
const node = (index: number, over: Partial<NodeObs> = {}): NodeObs => ({
  index, state: 'running', specCurrent: true, reachable: true, readOnly: true, replicating: false, semiSyncMaster: false, ...over,
});
/** Member 3 is local and named primary at the current term for position 0-1-10; member 2 is a local replica. */
const named = (gtid: string, position = '0-1-10', over: Partial<NodeObs> = {}): DbObs => ({
  known: true, provisioned: true, clusterSize: 3, primary: 3, rebuild: [],
  nodes: [node(2, { gtid: '0-1-10' }), node(3, { gtid, ...over })],
  accountsCurrent: false, proxiesCurrent: true, suspended: false, patchPending: false, patchRequested: false, windowOpen: false, primaryDownCount: 0,
  spread: { local: [2, 3], primaryKnown: true, semiSyncWanted: true, promotionPosition: position },
});

describe('the plan of a node named primary for a position', () => {
  it('promotes it once it holds the position', () => {
    expect(plan(running3, named('0-1-10'))[0]).toEqual({ kind: 'promote-primary' });
    expect(plan(running3, named('0-3-12'))[0]).toEqual({ kind: 'promote-primary' });
  });

  it('neither promotes it nor makes anything follow it while it lacks the position (a wiped or rebuilt node)', () => {
    expect(plan(running3, named('0-1-4'))).toEqual([]);
    expect(plan(running3, named(''))).toEqual([]);
    expect(plan(running3, { ...named('0-1-4'), proxiesCurrent: false })).toEqual([{ kind: 'sync-proxies' }]);
  });

  it('promotes as before when no position was sent (an older control plane)', () => {
    expect(plan(running3, named('', ''))[0]).toEqual({ kind: 'promote-primary' });
  });

  it('leaves a primary already serving writes alone (a later restore or a read of another term does not demote it)', () => {
    expect(promotionHeldBack(named('0-1-4').spread, node(3, { readOnly: false, gtid: '0-1-4' }))).toBe(false);
    // It goes on as the primary: its local replica is made to follow it.
    expect(plan(running3, named('0-1-4', '0-1-10', { readOnly: false, semiSyncMaster: true }))).toEqual([{ kind: 'rejoin', index: 2, rebuild: false }]);
  });
});

describe('the report of a node held back', () => {
  it('says "behind" for it, "primary" once it holds the position', () => {
    const state = { ...newDbState(4), addresses: ['198.18.9.1', '198.18.0.2', '198.18.0.3'], primary: 3, term: 5, provisioned: true };
    const detail = (gtid: string): NodeDetail => ({ ...node(3, { gtid }), address: '198.18.0.3', proxyNetworks: '', gtid, lastError: '' });
    const role = (gtid: string) => reportDatabase({
      id: 4, state, clusterSize: 3, details: [detail(gtid)], lastObs: named(gtid), obsGeneration: 1, lastStatus: '',
      nodeName: (k) => `n${k}`, primaryAddress: '198.18.0.3', caPem: '', events: [], usedDiskMb: 0,
    }).nodes?.find((n) => n.member === 3)?.role;
    expect(role('0-1-4')).toBe('behind');
    expect(role('0-1-10')).toBe('primary');
  });
});

describe('an agent given a promotion', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const desired = (term: number, primaryMember: number, primaryPosition: string): DesiredDatabase__Output => ({
    id: 4, clusterSize: 3, term, primaryMember, primaryPosition,
    members: [
      { index: 1, agentId: 'a', local: false, address: '198.18.9.1:3306' },
      { index: 2, agentId: 'b', local: false, address: '198.18.9.2:3306' },
      { index: 3, agentId: 'c', local: true, address: '198.18.0.3:3306' },
    ],
  }) as unknown as DesiredDatabase__Output;
  const controller = () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-promopos-'));
    dirs.push(stateDir);
    const c = new DatabaseController({
      id: 4, agentId: 'c', agentKey: 'abcdef', stateDir, runtime: {} as ContainerRuntime, runtimeKind: 'process', catalogue: [],
      logger: silentLogger(), clock: new ManualClock(0), nodeAddressPool: '198.18.0.0/29', takenAddresses: () => new Set(), onChange: () => undefined,
    });
    c.state = { ...newDbState(4), addresses: ['198.18.9.1', '198.18.9.2', '198.18.0.3'], primary: 1, term: 4, provisioned: true };
    return c;
  };

  it('requires the position only for the term and member it was sent with', async () => {
    const c = controller();
    c.setDesired(desired(5, 3, '0-1-10'));
    expect(c.promotionPosition()).toBe('');
    await c.followDesired();
    expect([c.state!.primary, c.state!.term, c.promotionPosition()]).toEqual([3, 5, '0-1-10']);
    c.setDesired(desired(5, 3, ''));
    expect(c.promotionPosition()).toBe('');
  });

  it('never wipes nor re-points a node the desired state names primary for a newer term', async () => {
    const c = controller();
    c.setDesired(desired(5, 3, '0-1-10'));
    const touched: string[] = [];
    const runtime = new Proxy({}, { get: (_t, p) => async () => { touched.push(String(p)); return { state: 'running' }; } }) as unknown as ContainerRuntime;
    const ctx = {
      state: c.state!, spec: c.desired!, spread: true, runtime, log: silentLogger(), dir: '/nonexistent',
      ensureTls: async () => undefined, nodeName: (k: number) => `n${k}`, nodeSpec: () => ({}), emit: () => undefined,
    } as unknown as RejoinContext;
    await expect(rejoin(ctx, 3, true)).rejects.toThrow(/named primary for term 5/);
    expect(touched).toEqual([]);
    expect(namedPrimaryAhead(c.desired, c.state!, 3)).toBe(true);
    expect(namedPrimaryAhead(c.desired, c.state!, 2)).toBe(false);
    // Once the agent follows that term the guard is off (the node is the primary, not rejoined).
    await c.followDesired();
    expect(namedPrimaryAhead(c.desired, c.state!, 3)).toBe(false);
  });
});
