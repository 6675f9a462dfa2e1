import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { loadDbState, newDbState } from '../../../agent/database/state.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';

/**
 * A spread cluster follows the control plane (docs/agent.md §10): the primary it names for the
 * highest term, the other members' reported addresses; a desired state of an older term is refused.
 */
describe('following the control plane\'s term', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const controller = () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-msp-term-'));
    dirs.push(stateDir);
    const c = new DatabaseController({
      id: 4, agentId: 'b', agentKey: 'abcdef', stateDir, runtime: {} as ContainerRuntime, runtimeKind: 'process', catalogue: [],
      logger: silentLogger(), clock: new ManualClock(0), nodeAddressPool: '198.18.0.0/29', takenAddresses: () => new Set(), onChange: () => undefined,
    });
    c.state = { ...newDbState(4), addresses: ['', '198.18.0.1', ''], primary: 1, term: 3, provisioned: true };
    return { c, stateDir };
  };
  const desired = (term: number, primaryMember: number): DesiredDatabase__Output => ({
    id: 4, clusterSize: 3, term, primaryMember,
    members: [
      { index: 1, agentId: 'a', local: false, address: '198.18.9.1:3306' },
      { index: 2, agentId: 'b', local: true, address: '198.18.0.1:3306' },
      { index: 3, agentId: 'c', local: false, address: '' },
    ],
  }) as unknown as DesiredDatabase__Output;

  it('takes the peers\' addresses and the primary of a higher term, and persists them', async () => {
    const { c, stateDir } = controller();
    c.desired = desired(4, 2);
    await c.followDesired();
    expect(c.state!.addresses).toEqual(['198.18.9.1', '198.18.0.1', '']);
    expect([c.state!.primary, c.state!.term]).toEqual([2, 4]);
    expect(c.nodeIndexes()).toEqual([2]);
    expect(loadDbState(stateDir, 4)?.term).toBe(4);
  });

  it('refuses an older term: the primary it follows stays', async () => {
    const { c } = controller();
    c.desired = desired(2, 2);
    await c.followDesired();
    expect([c.state!.primary, c.state!.term]).toEqual([1, 3]);
  });

  // A fenced primary is made writable again only by the control plane's explicit word that its
  // switchover was abandoned (docs/multi-host.md, "Planned switchover"), never by a term alone.
  it('keeps a fence over a higher term naming the fenced member again, lifts it on the abandonment of that very fence, ends it when another member is named', async () => {
    const fenced = () => {
      const { c } = controller();
      // Member 2, local here, is primary at term 3 and fenced.
      Object.assign(c.state!, { primary: 2, fencedTerm: 3 });
      return c;
    };
    const c = fenced();
    c.desired = desired(4, 2);
    await c.followDesired();
    expect([c.state!.term, c.state!.fencedTerm, c.spreadObs()?.fenced]).toEqual([4, 3, true]);
    c.desired = { ...desired(5, 2), fenceLiftedTerm: 4 };
    await c.followDesired();
    expect([c.state!.term, c.state!.fencedTerm]).toEqual([5, 3]);
    c.desired = { ...desired(6, 2), fenceLiftedTerm: 3 };
    await c.followDesired();
    expect([c.state!.term, c.state!.fencedTerm, c.spreadObs()?.fenced]).toEqual([6, undefined, false]);

    const moved = fenced();
    moved.desired = desired(4, 3);
    await moved.followDesired();
    expect([moved.state!.primary, moved.state!.fencedTerm]).toEqual([3, undefined]);
    // A later word about that fence does nothing: the member is no longer primary here.
    moved.desired = { ...desired(5, 3), fenceLiftedTerm: 3 };
    await moved.followDesired();
    expect([moved.state!.primary, moved.state!.fencedTerm]).toEqual([3, undefined]);
  });

  // A 1-node database fenced to move off a draining host: the store may already hold the fence's
  // position as the end of a rebuild elsewhere, so only the control plane's word that this very
  // move was abandoned makes the old node writable again (docs/multi-host.md, "Moving a 1-node
  // database off a draining host"), never a higher term alone.
  it('keeps a 1-node database fenced to move over a higher term, and over the abandonment of another fence; lifts it on the abandonment of that very move', async () => {
    const { c, stateDir } = controller();
    const one = (term: number, fenceLiftedTerm = 0): DesiredDatabase__Output => ({
      id: 4, clusterSize: 1, term, primaryMember: 0, fenceLiftedTerm,
      members: [{ index: 1, agentId: 'b', local: true, address: '' }],
    }) as unknown as DesiredDatabase__Output;
    c.state = { ...newDbState(4), addresses: [''], primary: 1, term: 3, provisioned: true, fencedTerm: 3 };
    c.desired = one(3);
    expect(c.movingOut).toBe(true);
    c.desired = one(4);
    await c.followDesired();
    expect([c.state!.fencedTerm, c.movingOut]).toEqual([3, true]);
    c.desired = one(5, 4);
    await c.followDesired();
    expect([c.state!.fencedTerm, c.movingOut]).toEqual([3, true]);
    c.desired = one(6, 3);
    await c.followDesired();
    expect([c.state!.fencedTerm, c.movingOut]).toEqual([undefined, false]);
    expect(loadDbState(stateDir, 4)?.fencedTerm).toBeUndefined();
  });
});
