import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { validateSnapshot } from '../../../dataplane/config/validate.js';
import { ConfigRuntime } from '../../../dataplane/runtime/config-runtime.js';
import { TrafficCounters } from '../../../dataplane/runtime/traffic-counters.js';
import { ConnThrottle } from '../../../dataplane/throttle/conn-throttle.js';
import { isFailureStatus } from '../../../dataplane/health/passive.js';
import { afterProbe, RISE } from '../../../dataplane/health/rise-fall.js';
import type { HealthEvent } from '../../../dataplane/telemetry/telemetry-source.js';

function runtime(extra: Record<string, unknown>) {
  const snap = validateSnapshot({ version: 1, nodebalancers: [{ id: 7, ipv4: '127.0.0.1', configs: [{
    id: 3, port: 80, protocol: 'http', nodes: [{ id: 1, address: '127.0.0.1:1' }, { id: 2, address: '127.0.0.1:2' }], ...extra,
  }] }] });
  const clock = new ManualClock();
  const events: HealthEvent[] = [];
  const rt = new ConfigRuntime(snap.nodebalancers[0].configs[0], new ConnThrottle(0, clock), clock, silentLogger(), (e) => events.push(e));
  return { rt, events };
}

describe('SessionConfig (what sessions may do to their config)', () => {
  it('failed() takes a node DOWN at once under check_passive, reports it, and stops choosing it', () => {
    const { rt, events } = runtime({ algorithm: 'roundrobin' });
    const a = rt.nodes.get(1)!;
    const b = rt.nodes.get(2)!;
    events.length = 0;
    rt.failed(a, 'status 502');
    expect(a.status).toBe('DOWN');
    expect(events).toEqual([expect.objectContaining({ nodebalancerId: 7, configId: 3, nodeId: 1, status: 'DOWN' })]);
    for (let i = 0; i < 10; i++) expect(rt.choose('1.2.3.4', 1, undefined, null)).toBe(b);
    rt.failed(a, 'again');
    expect(events).toHaveLength(1);
  });

  it('failed() changes nothing when check_passive is off', () => {
    const { rt, events } = runtime({ checkPassive: false });
    events.length = 0;
    rt.failed(rt.nodes.get(1)!, 'status 500');
    expect(rt.nodes.get(1)!.status).not.toBe('DOWN');
    expect(events).toEqual([]);
  });

  it('opened()/closed() are the in-flight count leastconn balances on', () => {
    const { rt } = runtime({ algorithm: 'leastconn' });
    const first = rt.choose('1.2.3.4', 1, undefined, null)!;
    rt.opened(first);
    const second = rt.choose('1.2.3.4', 1, undefined, null)!;
    expect(second).not.toBe(first);
    rt.opened(second);
    rt.closed(first);
    expect(rt.choose('1.2.3.4', 1, undefined, null)).toBe(first);
    expect(first.active).toBe(0);
    expect(second.active).toBe(1);
  });

  it('pinnedBy() names a node only under http_cookie stickiness', () => {
    const cookie = runtime({ stickiness: 'http_cookie' }).rt;
    const node = cookie.nodes.get(2)!;
    expect(cookie.pinnedBy(node.cookie)).toBe(node);
    expect(cookie.pinnedBy('')).toBeUndefined();
    const none = runtime({}).rt;
    expect(none.pinnedBy(none.nodes.get(2)!.cookie)).toBeUndefined();
  });
});

describe('traffic counters', () => {
  it('count bytes, connections and status classes by name, and hand out deltas once', () => {
    const t = new TrafficCounters();
    t.connectionOpened();
    t.received(10);
    t.sent(25);
    for (const s of [101, 200, 204, 302, 404, 503, 600, 99]) t.response(s);
    t.connectionClosed();
    expect(t).toMatchObject({ open: 0, totalConns: 1, totalIn: 10, totalOut: 25, status1xx: 1, status2xx: 2, status3xx: 1, status4xx: 1, status5xx: 1 });
    expect(t.hasDelta).toBe(true);
    t.resetDelta();
    expect(t.hasDelta).toBe(false);
    expect(t.totalOut).toBe(25);
  });
});

describe('health rules', () => {
  it('passive: a 5xx counts against the node, except 501 and 505', () => {
    expect([500, 502, 503, 504, 599].every(isFailureStatus)).toBe(true);
    expect([200, 404, 501, 505].some(isFailureStatus)).toBe(false);
  });

  it('active: UP at the first pass, DOWN after check_attempts failures, back after RISE passes', () => {
    const node = { status: 'unknown', fails: 0, passes: 0 } as Parameters<typeof afterProbe>[0];
    expect(afterProbe(node, null, 3)).toBe('UP');
    node.status = 'UP';
    expect([afterProbe(node, 'x', 3), afterProbe(node, 'x', 3), afterProbe(node, 'x', 3)]).toEqual([null, null, 'DOWN']);
    node.status = 'DOWN';
    const back = Array.from({ length: RISE }, () => afterProbe(node, null, 3));
    expect(back.at(-1)).toBe('UP');
    expect(back.slice(0, -1).every((s) => s === null)).toBe(true);
  });
});
