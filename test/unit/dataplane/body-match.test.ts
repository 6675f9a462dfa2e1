import { afterEach, describe, expect, it } from 'vitest';
import { BodyMatcher, DEFAULT_MATCHER_LIMITS, type MatcherLimits } from '../../../dataplane/health/body-match.js';

// A few ms per match anywhere (quadratic backtracking over spaces), never near the time limit.
const SLOW = /.*a.*b/;
const SLOW_TEXT = ' '.repeat(2000);
const A = { nodebalancerId: 1, configId: 10 };
const B = { nodebalancerId: 2, configId: 20 };

const matchers: BodyMatcher[] = [];
function matcher(limits: Partial<MatcherLimits> = {}): BodyMatcher {
  // A generous time limit and budget: these cases are about scheduling, not a loaded machine's timing.
  const m = new BodyMatcher({ ...DEFAULT_MATCHER_LIMITS, timeLimitMs: 10_000, cpuBudgetMs: 60_000, quantumMs: 1, ...limits });
  matchers.push(m);
  return m;
}
afterEach(() => {
  for (const m of matchers.splice(0)) m.close();
});

describe('check_body matcher scheduling', () => {
  it("serves another config's match after one slow match, not after the whole queue", async () => {
    const m = matcher();
    const order: string[] = [];
    const all = [];
    for (let i = 0; i < 6; i++) all.push(m.match(A, SLOW, SLOW_TEXT).then((r) => order.push(`a:${r}`)));
    all.push(m.match(B, /ok/, 'ok').then((r) => order.push(`b:${r}`)));
    await Promise.all(all);
    expect(order.indexOf('b:match')).toBeLessThanOrEqual(1);
    expect(order.filter((o) => o === 'a:no_match')).toHaveLength(6);
  });

  it('drops a waiting match when its probe ends, and never runs it', async () => {
    const m = matcher();
    const first = m.match(A, SLOW, SLOW_TEXT);
    const ended = new AbortController();
    const second = m.match(A, SLOW, SLOW_TEXT, ended.signal);
    ended.abort();
    expect(await second).toBe('cancelled');
    expect(await first).toBe('no_match');
    expect(m.dropped.probe_ended).toBe(1);
  });

  it("quarantines a config whose matches used its budget, and only that config", async () => {
    const m = matcher({ cpuBudgetMs: 1 });
    const first = await Promise.all([m.match(A, SLOW, SLOW_TEXT), m.match(A, SLOW, SLOW_TEXT)]);
    expect(first[0]).toBe('no_match');
    expect(await m.match(A, SLOW, SLOW_TEXT)).toBe('quarantined');
    expect(m.quarantines.cpu_budget).toBe(1);
    expect([...m.quarantinedConfigs()]).toEqual(['1/10']);
    expect(await m.match(B, /ok/, 'ok')).toBe('match');
    // A changed pattern starts afresh.
    expect(await m.match(A, /ok/, 'ok')).toBe('match');
  });

  it('bounds the matches waiting per config', async () => {
    const m = matcher({ maxQueuedPerConfig: 2 });
    const waiting = [m.match(A, SLOW, SLOW_TEXT), m.match(A, SLOW, SLOW_TEXT), m.match(A, SLOW, SLOW_TEXT)];
    expect(await m.match(A, SLOW, SLOW_TEXT)).toBe('queue_full');
    expect(await m.match(B, /ok/, 'ok')).toBe('match');
    await Promise.all(waiting);
    expect(m.dropped.queue_full).toBeGreaterThanOrEqual(1);
  });
});
