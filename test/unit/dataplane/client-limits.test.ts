import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { ConnLimits, UDP_SESSIONS_PER_CONNECTION } from '../../../dataplane/throttle/conn-limits.js';
import { ConnThrottle } from '../../../dataplane/throttle/conn-throttle.js';
import { SessionRate } from '../../../dataplane/throttle/session-rate.js';

/** The per-client arithmetic behind test/security/client-key-limits.test.ts (docs/security/traffic.md "UDP"). */
describe('SessionRate', () => {
  it('gives a key its burst, then refills at the rate', () => {
    const clock = new ManualClock();
    const r = new SessionRate(10, 20, 100, clock);
    let ok = 0;
    for (let i = 0; i < 30; i++) if (r.take('a')) ok++;
    expect(ok).toBe(20);
    expect(r.take('b')).toBe(true);
    clock.advance(500);
    ok = 0;
    for (let i = 0; i < 30; i++) if (r.take('a')) ok++;
    expect(ok).toBe(5);
    r.refund('a');
    expect(r.take('a')).toBe(true);
    expect(r.take('a')).toBe(false);
  });

  it('tracks at most maxKeys: refilled keys go first, then the least recently used', () => {
    const clock = new ManualClock();
    const r = new SessionRate(1, 2, 3, clock);
    for (const k of ['a', 'b', 'c']) r.take(k);
    r.take('a');
    r.take('a');
    expect(r.take('a')).toBe(false);
    // Full: 'b' is the least recently used of the three and goes; 'a' stays empty.
    r.take('d');
    expect(r.size).toBe(3);
    expect(r.take('a')).toBe(false);
    // Once every bucket has refilled, a sweep drops them all at the next new key.
    clock.advance(10_000);
    r.take('e');
    expect(r.size).toBe(1);
  });

  it('rate 0 is off', () => {
    const r = new SessionRate(0, 0, 1, new ManualClock());
    for (let i = 0; i < 100; i++) expect(r.take(String(i))).toBe(true);
    expect(r.size).toBe(0);
  });
});

describe('ConnLimits per-client total', () => {
  it('counts a UDP session as 1/16 of a connection, over every NodeBalancer, by client key', () => {
    const clock = new ManualClock();
    const limits = new ConnLimits({ perClient: 2, udpSessionsPerClient: 0 }, clock);
    const [tcp, udpA, udpB] = [new ConnThrottle(0, clock, 0, 0), new ConnThrottle(0, clock, 0, 0), new ConnThrottle(0, clock, 0, 0)];
    const key = limits.key('2001:db8:1:2::7');
    expect(key).toBe(limits.key('2001:db8:1:2::8'));
    expect(limits.admit(tcp, key)).toBe(true);
    let udp = 0;
    for (let i = 0; i < 40; i++) if (limits.admitUdp(i % 2 === 0 ? udpA : udpB, key)) udp++;
    expect(udp).toBe(UDP_SESSIONS_PER_CONNECTION);
    expect(limits.refused.udp_client_total_cap).toBe(40 - UDP_SESSIONS_PER_CONNECTION);
    expect(limits.admit(tcp, key)).toBe(false);
    expect(limits.refused.client_total_cap).toBe(1);
    limits.release(tcp, key);
    expect(limits.open).toBe(0);
    expect(limits.udpSessions).toBe(UDP_SESSIONS_PER_CONNECTION);
    expect(limits.admit(tcp, key)).toBe(true);
    // Another /64 is another client.
    expect(limits.admitUdp(udpA, limits.key('2001:db8:1:3::7'))).toBe(true);
  });

  it('a session refused by client_udp_sess_throttle gives its rate token back', () => {
    const clock = new ManualClock();
    const limits = new ConnLimits({ udpNewSessionsPerSecond: 1 }, clock);
    const throttled = new ConnThrottle(1, clock, 0, 0);
    expect(limits.admitUdp(throttled, 'k')).toBe(true);
    expect(limits.admitUdp(throttled, 'k')).toBe(false);
    expect(limits.refused.udp_throttle).toBe(1);
    // The bucket (2 tokens) still holds one: another NodeBalancer admits the client.
    expect(limits.admitUdp(new ConnThrottle(0, clock, 0, 0), 'k')).toBe(true);
    expect(limits.admitUdp(new ConnThrottle(0, clock, 0, 0), 'k')).toBe(false);
    expect(limits.refused.udp_rate).toBe(1);
  });
});

/** docs/dataplane.md "UDP on every worker": each of N workers keeps 1/N of every UDP limit. */
describe('ConnLimits with udpShare', () => {
  it('divides the new-session rate, the per-client session count in the client total, and the NodeBalancer gates', () => {
    const clock = new ManualClock();
    const limits = new ConnLimits({ perClient: 2, udpNewSessionsPerSecond: 1000, udpShare: 2 }, clock);
    const nb = new ConnThrottle(0, clock, 0, 0);
    let udp = 0;
    for (let i = 0; i < 100; i++) if (limits.admitUdp(nb, 'c')) udp++;
    // The client total is 2 connections = 32 sessions for the data plane: 16 in this worker.
    expect(udp).toBe(UDP_SESSIONS_PER_CONNECTION);
    expect(limits.refused.udp_client_total_cap).toBe(100 - UDP_SESSIONS_PER_CONNECTION);
    for (let i = 0; i < udp; i++) limits.releaseUdp(nb, 'c');
    expect(limits.admitUdp(nb, 'c')).toBe(true);
    expect([limits.udpPart(2000), limits.udpPart(5), limits.udpPart(1), limits.udpPart(0)]).toEqual([1000, 2, 1, 0]);
  });

  it('keeps the new-session bucket at its share: 500 a second, 1,000 at once, for 1,000 over two workers', () => {
    const clock = new ManualClock();
    const limits = new ConnLimits({ udpNewSessionsPerSecond: 500, udpShare: 2, perClient: 0 }, clock);
    const nb = new ConnThrottle(0, clock, 0, 0);
    let ok = 0;
    for (let i = 0; i < 1000; i++) if (limits.admitUdp(nb, 'c')) ok++;
    expect(ok).toBe(500);
    expect(limits.refused.udp_rate).toBe(500);
  });
});
