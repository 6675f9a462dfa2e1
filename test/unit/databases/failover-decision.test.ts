import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { AGENT_SILENT_MS, FAILOVER_AFTER_MS, decideFailover, gtidProgress, type FailoverDecision, type MemberView } from '../../../control-plane/domain/databases/failover-decision.js';

/** Three members on agents a, b, c; member 1 primary; every agent connected and just seen. */
function cluster(clock: ManualClock, over: Partial<Record<number, Partial<MemberView>>> = {}): MemberView[] {
  const gtid = { 1: '0-1-10', 2: '0-1-9', 3: '0-1-10' } as Record<number, string>;
  return [1, 2, 3].map((k) => ({
    member: k, agentId: 'abc'[k - 1]!, agentConnected: true, agentSeenAt: clock.now(),
    node: { state: 'running', role: k === 1 ? 'primary' : 'replica', gtid: gtid[k]! },
    ...over[k],
  }));
}

/** Runs the decision the way the coordinator does: lostSince carried between calls. */
function driver(clock: ManualClock) {
  let lostSince: number | null = null;
  return (members: MemberView[], term = 4): FailoverDecision => {
    const d = decideFailover({ clusterSize: 3, term, primaryMember: 1, members, lostSince }, clock.now());
    lostSince = d.kind === 'waiting' || d.kind === 'stuck' ? d.lostSince : null;
    return d;
  };
}

describe('the control plane failover decision', () => {
  it('leaves a healthy cluster alone, and a 1-node database always', () => {
    const clock = new ManualClock();
    expect(driver(clock)(cluster(clock))).toEqual({ kind: 'healthy' });
    expect(decideFailover({ clusterSize: 1, term: 1, primaryMember: 1, members: [], lostSince: null }, clock.now())).toEqual({ kind: 'healthy' });
  });

  it('promotes the most advanced replica once the primary agent has been disconnected for FAILOVER_AFTER_MS, raising the term', () => {
    const clock = new ManualClock();
    const decide = driver(clock);
    const cut = () => cluster(clock, { 1: { agentConnected: false, agentSeenAt: clock.now() - 1000 } });
    expect(decide(cut())).toMatchObject({ kind: 'waiting', cause: expect.stringContaining('agent a of the primary is disconnected') });
    clock.advance(FAILOVER_AFTER_MS - 1);
    expect(decide(cut()).kind).toBe('waiting');
    clock.advance(1);
    // Member 3 is at seq 10, member 2 at 9.
    expect(decide(cut())).toEqual({ kind: 'promote', member: 3, agentId: 'c', term: 5, position: '0-1-10', cause: expect.stringContaining('disconnected') });
  });

  it('counts an agent silent for longer than AGENT_SILENT_MS as gone even with its stream open (a cut link before keepalive fires)', () => {
    const clock = new ManualClock();
    const decide = driver(clock);
    const seen = clock.now();
    clock.advance(AGENT_SILENT_MS);
    const silent = () => cluster(clock, { 1: { agentSeenAt: seen } });
    expect(decide(silent()).kind).toBe('healthy');
    clock.advance(1);
    expect(decide(silent())).toMatchObject({ kind: 'waiting', cause: expect.stringContaining('has not reported') });
    clock.advance(FAILOVER_AFTER_MS);
    expect(decide(silent())).toMatchObject({ kind: 'promote', member: 3, term: 5 });
  });

  it('fails over when the primary agent reports its member down for long enough, and forgets a short blip', () => {
    const clock = new ManualClock();
    const decide = driver(clock);
    const down = () => cluster(clock, { 1: { node: { state: 'stopped', role: 'down', gtid: '0-1-10' } } });
    expect(decide(down())).toMatchObject({ kind: 'waiting', cause: expect.stringContaining('reports the primary stopped') });
    clock.advance(FAILOVER_AFTER_MS - 500);
    expect(decide(cluster(clock)).kind).toBe('healthy');
    clock.advance(1000);
    expect(decide(down()).kind).toBe('waiting');
    clock.advance(FAILOVER_AFTER_MS);
    expect(decide(down())).toMatchObject({ kind: 'promote', member: 3 });
  });

  it('never promotes a replica whose agent is gone or that does not run, and says it is stuck with no candidate', () => {
    const clock = new ManualClock();
    const decide = driver(clock);
    const members = () => cluster(clock, {
      1: { agentConnected: false },
      3: { agentConnected: false },
      2: { node: { state: 'running', role: 'down', gtid: '0-1-9' } },
    });
    decide(members());
    clock.advance(FAILOVER_AFTER_MS);
    expect(decide(members())).toMatchObject({ kind: 'stuck', cause: expect.stringContaining('no replica runs on a connected agent') });
    // Member 2 answers again: it is the only candidate, though behind.
    expect(decide(cluster(clock, { 1: { agentConnected: false }, 3: { agentConnected: false } }))).toMatchObject({ kind: 'promote', member: 2, agentId: 'b' });
  });

  it('does not act on a primary its agent has not reported yet (a control plane that just started)', () => {
    const clock = new ManualClock();
    expect(driver(clock)(cluster(clock, { 1: { node: undefined } })).kind).toBe('healthy');
  });

  it('breaks GTID ties by the lowest member and reads every replication domain', () => {
    const clock = new ManualClock();
    const decide = driver(clock);
    const cut = () => cluster(clock, { 1: { agentConnected: false }, 2: { node: { state: 'running', role: 'replica', gtid: '0-1-10' } } });
    decide(cut());
    clock.advance(FAILOVER_AFTER_MS);
    expect(decide(cut())).toMatchObject({ kind: 'promote', member: 2 });
    expect(gtidProgress('0-1-10,1-2-5')).toBe(15);
    expect(gtidProgress('')).toBe(0);
    expect(gtidProgress('garbage,0-1-3')).toBe(3);
  });
});

/**
 * A promotion carries the position it was decided for, and a member that lacks the position the
 * current primary was named for is never named: the failure seen when a drain's switchover was
 * abandoned and the member promoted from its last report had been wiped and rebuilt behind it.
 */
describe('the position a promotion is decided for', () => {
  const at = (clock: ManualClock, primaryMember: number, primaryPosition: string, members: MemberView[], lostSince: number | null = null) =>
    decideFailover({ clusterSize: 3, term: 5, primaryMember, primaryPosition, members, lostSince }, clock.now());

  it('gives the promoted member the GTID position of the report it was chosen from', () => {
    const clock = new ManualClock();
    const members = cluster(clock, { 1: { agentConnected: false } });
    expect(at(clock, 1, '', members, clock.now() - FAILOVER_AFTER_MS)).toMatchObject({ kind: 'promote', member: 3, term: 6, position: '0-1-10' });
  });

  it('counts a named primary its agent reports "behind" as lost, and names a member that holds the position instead', () => {
    const clock = new ManualClock();
    // Member 3 was named at term 5 for 0-1-10 but was wiped meanwhile; member 1 (old primary) and 2 hold it.
    const members = cluster(clock, {
      1: { node: { state: 'running', role: 'replica', gtid: '0-1-10' } },
      3: { node: { state: 'running', role: 'behind', gtid: '0-1-4' } },
    });
    const first = at(clock, 3, '0-1-10', members);
    expect(first).toMatchObject({ kind: 'waiting', cause: expect.stringContaining('lacks the position it was named for') });
    clock.advance(FAILOVER_AFTER_MS);
    expect(at(clock, 3, '0-1-10', members, first.kind === 'waiting' ? first.lostSince : null)).toMatchObject({ kind: 'promote', member: 1, term: 6, position: '0-1-10' });
  });

  it('never promotes a replica that lacks the position the current primary was named for: stuck until one holds it', () => {
    const clock = new ManualClock();
    const lost = clock.now() - FAILOVER_AFTER_MS;
    const behind = cluster(clock, {
      1: { agentConnected: false },
      2: { node: { state: 'running', role: 'replica', gtid: '0-1-4' } },
      3: { node: { state: 'running', role: 'replica', gtid: '0-1-9' } },
    });
    expect(at(clock, 1, '0-1-10', behind, lost)).toMatchObject({ kind: 'stuck', cause: expect.stringContaining('no replica holds the position 0-1-10') });
    // Without a recorded position (an older control plane's row): the most advanced, as before.
    expect(at(clock, 1, '', behind, lost)).toMatchObject({ kind: 'promote', member: 3, position: '0-1-9' });
    // Once member 2 has caught up, it is named (the most advanced that holds the position).
    const caught = cluster(clock, { 1: { agentConnected: false }, 2: { node: { state: 'running', role: 'replica', gtid: '0-2-11' } }, 3: { node: { state: 'running', role: 'replica', gtid: '0-1-9' } } });
    expect(at(clock, 1, '0-1-10', caught, lost)).toMatchObject({ kind: 'promote', member: 2, position: '0-2-11' });
  });

  // A member re-placed on a new host is seeded (a base restored at a position, then replication)
  // until its "caught up" event: the position it reports can equal or pass the other replica's
  // while rows below it are still missing (docs/multi-host.md, "Failover candidates").
  it('never promotes a member still being seeded, however far its reported position: the other replica, or stuck saying why, until it has caught up', () => {
    const clock = new ManualClock();
    // Member 3 restored from a base at seq 12 reports past member 2 (seq 9, lagging).
    const ahead = (over: Partial<Record<number, Partial<MemberView>>> = {}) => cluster(clock, {
      1: { agentConnected: false, agentSeenAt: clock.now() - 1000 },
      3: { node: { state: 'running', role: 'replica', gtid: '0-1-12' }, seeding: true },
      ...over,
    });
    const lost = clock.now();
    expect(at(clock, 1, '', ahead(), lost).kind).toBe('waiting');
    clock.advance(FAILOVER_AFTER_MS);
    expect(at(clock, 1, '', ahead(), lost)).toMatchObject({ kind: 'promote', member: 2, position: '0-1-9' });

    // Member 2 gone as well: the seeding member is the only running replica. Stuck, naming it,
    // for as long as it seeds.
    const alone = () => ahead({ 2: { agentConnected: false } });
    expect(at(clock, 1, '', alone(), lost)).toMatchObject({
      kind: 'stuck', seeding: [3], cause: expect.stringMatching(/no replica runs on a connected agent; member 3 is still being seeded on a new host and is not promoted before it has caught up/),
    });
    clock.advance(60_000);
    expect(at(clock, 1, '', alone(), lost)).toMatchObject({ kind: 'stuck', seeding: [3] });
    // Its mark cleared (it reported itself a replica as far as the primary was at its placement):
    // a candidate like any other.
    expect(at(clock, 1, '', ahead({ 2: { agentConnected: false }, 3: { node: { state: 'running', role: 'replica', gtid: '0-1-12' }, seeding: false } }), lost))
      .toMatchObject({ kind: 'promote', member: 3, position: '0-1-12', term: 6 });
    // A stuck decision without a seeding member names none.
    const none = at(clock, 1, '', cluster(clock, { 1: { agentConnected: false }, 2: { agentConnected: false }, 3: { agentConnected: false } }), lost);
    expect(none.kind).toBe('stuck');
    expect(none).not.toHaveProperty('seeding');
  });
});
