import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { SharedState } from '../../../dataplane/workers/shared-state.js';

/** The primary's side of what a data plane's workers agree on (docs/dataplane.md, "Workers"). */
describe('SharedState', () => {
  const down = new Set<string>();
  const make = (clock: ManualClock) => new SharedState(clock, (c, n) => !down.has(`${c}/${n}`));
  let id = 0;
  const ask = (s: SharedState, ip: string, extra: { limit?: number; config?: number; node?: number } = {}) =>
    s.admit({ t: 'admit', id: ++id, nb: 1, limit: extra.limit ?? 0, ip, key: ip, config: extra.config, node: extra.node });

  it('counts client_conn_throttle over every worker\'s requests, per client IP, in a sliding second', () => {
    const clock = new ManualClock();
    const s = make(clock);
    const oks = Array.from({ length: 8 }, () => ask(s, '10.0.0.1', { limit: 5 }).ok);
    expect(oks.filter(Boolean).length).toBe(5);
    expect(ask(s, '10.0.0.2', { limit: 5 }).ok).toBe(true);
    clock.advance(1000);
    expect(ask(s, '10.0.0.1', { limit: 5 }).ok).toBe(true);
  });

  it('keeps the first proposal for a client IP, with its age, until its node goes down', () => {
    const clock = new ManualClock();
    const s = make(clock);
    const first = ask(s, '10.0.0.3', { config: 7, node: 1 });
    expect(first).toMatchObject({ ok: true, node: 1, added: clock.now() });
    clock.advance(5000);
    // Another worker proposes node 2 for the same client: it gets node 1, as made 5 s ago.
    expect(ask(s, '10.0.0.3', { config: 7, node: 2 })).toMatchObject({ node: 1, added: first.added });
    down.add('7/1');
    s.nodeDown(7, 1);
    expect(ask(s, '10.0.0.3', { config: 7, node: 2 })).toMatchObject({ node: 2, added: clock.now() });
    down.clear();
    // A throttled client is refused before any table entry is made.
    expect(ask(s, '10.0.0.4', { limit: 1, config: 7, node: 1 }).ok).toBe(true);
    expect(ask(s, '10.0.0.4', { limit: 1, config: 7, node: 2 })).toEqual({ t: 'admitted', id, ok: false });
  });

  it('forgets NodeBalancers and configs that left the snapshot', () => {
    const clock = new ManualClock();
    const s = make(clock);
    ask(s, '10.0.0.5', { config: 9, node: 1 });
    s.retain(new Set([1]), new Set());
    expect(ask(s, '10.0.0.5', { config: 9, node: 3 })).toMatchObject({ node: 3 });
  });
});
