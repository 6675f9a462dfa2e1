import { describe, expect, it } from 'vitest';
import type { ProxyEngine } from '../../../dataplane/engine.js';
import { waitFor } from '../../helpers/backends.js';
import { snapshot } from './snapshot.js';
import { counts, startUdpTrio } from './udp-harness.js';

/**
 * UDP load balancing with real sockets (docs/dataplane.md "UDP"): three echo backends that answer
 * with their own name, each on its own 127.117.x address with a TCP port for udp_check_port.
 */

function refused(engine: ProxyEngine, reason: string): number {
  return (engine.refusals() as Record<string, number>)[reason] ?? 0;
}

describe('UDP configs', () => {
  it('spreads 30 flows over three nodes by roundrobin, and session keeps each flow on its node', async () => {
    const { flow } = await startUdpTrio({ algorithm: 'roundrobin' });
    const flows = Array.from({ length: 30 }, flow);
    const first: (string | null)[] = [];
    for (const f of flows) first.push(await f.who());
    expect(counts(first)).toEqual({ a: 10, b: 10, c: 10 });
    for (let round = 0; round < 3; round++) {
      for (const [i, f] of flows.entries()) expect(await f.who(`again-${round}`)).toBe(first[i]);
    }
  });

  it('stickiness none: one flow is spread over every node per datagram, and every node\'s answer comes back', async () => {
    // The session's socket starts connected to its first node and leaves that for good at the
    // first move; answers from the first node must still come back afterwards.
    const { flow } = await startUdpTrio({ algorithm: 'roundrobin', stickiness: 'none' });
    const f = flow();
    const seen: (string | null)[] = [];
    for (let i = 0; i < 9; i++) seen.push(await f.who(`n-${i}`));
    expect(counts(seen)).toEqual({ a: 3, b: 3, c: 3 });
  });

  it('a flow silent for longer than udp_session_timeout starts a new session, which may go elsewhere', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'roundrobin', udpSessionTimeout: 1 });
    const f = flow();
    const before = await f.who();
    expect(before).not.toBeNull();
    // Within the timeout it stays; after a silence past it, roundrobin hands out the next node.
    expect(await f.who()).toBe(before);
    engine.drainCounters();
    let after: string | null = before;
    await waitFor(async () => {
      await new Promise((r) => setTimeout(r, 1200));
      after = await f.who();
      return after !== before;
    }, 20_000, 'the flow to move after the session timed out');
    expect(after).not.toBeNull();
    const opened = engine.drainCounters().reduce((a, d) => a + d.connections, 0);
    expect(opened).toBeGreaterThanOrEqual(1);
  });

  it('ring_hash: removing a node moves only the flows that were on it', async () => {
    const { engine, flow, nb, cfg, nodes } = await startUdpTrio({ algorithm: 'ring_hash', stickiness: 'none' });
    const flows = Array.from({ length: 30 }, flow);
    const before: (string | null)[] = [];
    for (const f of flows) before.push(await f.who());
    const spread = counts(before);
    expect(Object.keys(spread).sort()).toEqual(['a', 'b', 'c']);
    // The same flows hash to the same nodes again.
    for (const [i, f] of flows.entries()) expect(await f.who()).toBe(before[i]);
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...cfg, nodes: nodes.slice(0, 2) }] }]));
    for (const [i, f] of flows.entries()) {
      const now = await f.who();
      if (before[i] === 'c') expect(['a', 'b']).toContain(now);
      else expect(now).toBe(before[i]);
    }
    // And adding it back returns exactly its share.
    await engine.apply(snapshot(3, [{ ...nb, configs: [{ ...cfg, nodes }] }]));
    for (const [i, f] of flows.entries()) expect(await f.who()).toBe(before[i]);
  });

  it('a stopped node is marked DOWN by its udp_check_port check and its flows move on their next datagram', async () => {
    const { flow, backends, checks, status } = await startUdpTrio({ algorithm: 'roundrobin', check: 'connection', checkInterval: 1, checkTimeout: 1, checkAttempts: 2 });
    await waitFor(() => ['a', 'b', 'c'].every((n) => status(n) === 'UP'), 15_000, 'first checks pass');
    const flows = Array.from({ length: 9 }, flow);
    const first: (string | null)[] = [];
    for (const f of flows) first.push(await f.who());
    expect(counts(first)).toEqual({ a: 3, b: 3, c: 3 });
    await checks[2]!.close();
    await backends[2]!.close();
    await waitFor(() => status('c') === 'DOWN', 20_000, 'c marked DOWN by its check');
    for (const [i, f] of flows.entries()) {
      const now = await f.who();
      if (first[i] === 'c') expect(['a', 'b']).toContain(now);
      else expect(now).toBe(first[i]);
    }
  });

  it('client_udp_sess_throttle refuses new sessions from one IP past the limit; its sessions keep working', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'roundrobin' }, { nbExtra: { clientUdpSessThrottle: 5 } });
    const flows = Array.from({ length: 8 }, flow);
    await Promise.all(flows.map((f) => f.ready));
    // All eight first datagrams leave in one tick, well inside one second.
    const answers = flows.map((f) => f.ask('hello', 3000));
    const got = await Promise.all(answers);
    expect(got.filter((a) => a !== null)).toHaveLength(5);
    expect(refused(engine, 'udp_throttle')).toBe(3);
    const burstEnded = Date.now();
    for (const [i, f] of flows.entries()) if (got[i] !== null) expect(await f.ask('more')).not.toBeNull();
    // A rate, not a lifetime cap: once the burst's second has passed, five new sessions are taken
    // again (and a sixth in the same second is not), while the first five are still open.
    await new Promise((r) => setTimeout(r, Math.max(0, burstEnded + 1200 - Date.now())));
    const later = Array.from({ length: 6 }, flow);
    await Promise.all(later.map((f) => f.ready));
    const again = await Promise.all(later.map((f) => f.ask('later', 3000)));
    expect(again.filter((a) => a !== null)).toHaveLength(5);
    expect(refused(engine, 'udp_throttle')).toBe(4);
  });

  it('caps sessions per client IP, so one source cannot take every session', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'roundrobin' }, { limits: { udpSessionsPerClient: 4 } });
    const got: (string | null)[] = [];
    for (const f of Array.from({ length: 6 }, flow)) got.push(await f.who('x', 1000));
    expect(got.filter((a) => a !== null)).toHaveLength(4);
    expect(refused(engine, 'udp_client_cap')).toBe(2);
  });

  it('a premium NodeBalancer gives each client IP 8 times the per-client session cap', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'roundrobin' }, { nbExtra: { type: 'premium' }, limits: { udpSessionsPerClient: 2 } });
    const got: (string | null)[] = [];
    for (const f of Array.from({ length: 17 }, flow)) got.push(await f.who('x', 1000));
    expect(got.slice(0, 16).every((a) => a !== null)).toBe(true);
    expect(got[16]).toBeNull();
    expect(refused(engine, 'udp_client_cap')).toBe(1);
  });

  it('several flows from one client address are separate sessions, and each ends on its own silence', async () => {
    // Sessions are kept by client address, then port: flows sharing an address must neither
    // collide nor outlive their timeout, and a flow whose session ended must start a new one.
    // (No count is checked between datagrams: with a 1 s timeout a slow machine could end one.)
    const { flow, engine, cfg } = await startUdpTrio({ algorithm: 'roundrobin', udpSessionTimeout: 1 });
    const open = () => engine.config(cfg.id as number)!.traffic.open;
    const first = Array.from({ length: 3 }, flow);
    const names: (string | null)[] = [];
    for (const f of first) names.push(await f.who('x', 1000));
    expect(counts(names)).toEqual({ a: 1, b: 1, c: 1 });
    // After a second of silence the sweep ends all three, each taken out of its address's table.
    await waitFor(() => open() === 0, 15_000);
    // The same three flows come back as new sessions.
    for (const f of first) expect(await f.who('again', 2000)).not.toBeNull();
  });

  it('counts transfer: bytes in and out match what was sent and answered, one connection per session', async () => {
    const { flow, engine } = await startUdpTrio({ algorithm: 'leastconn' });
    engine.drainCounters();
    let sent = 0;
    let answered = 0;
    for (const f of Array.from({ length: 4 }, flow)) {
      for (let i = 0; i < 5; i++) {
        const msg = 'x'.repeat(100 + i * 37);
        sent += msg.length;
        const a = await f.ask(msg);
        expect(a).not.toBeNull();
        answered += Buffer.byteLength(a!);
      }
    }
    const deltas = engine.drainCounters();
    expect(deltas.reduce((a, d) => a + d.bytesIn, 0)).toBe(sent);
    expect(deltas.reduce((a, d) => a + d.bytesOut, 0)).toBe(answered);
    expect(deltas.reduce((a, d) => a + d.connections, 0)).toBe(4);
  });

  it('leastconn spreads sessions by open sessions; drain keeps sessions but takes no new ones', async () => {
    const { flow, engine, nb, cfg, nodes } = await startUdpTrio({ algorithm: 'leastconn' });
    const flows = Array.from({ length: 6 }, flow);
    const first: (string | null)[] = [];
    for (const f of flows) first.push(await f.who());
    expect(counts(first)).toEqual({ a: 2, b: 2, c: 2 });
    const drained = nodes.map((n, i) => (i === 0 ? { ...n, mode: 'drain' } : n));
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...cfg, nodes: drained }] }]));
    for (const [i, f] of flows.entries()) expect(await f.who()).toBe(first[i]);
    for (const f of Array.from({ length: 4 }, flow)) expect(['b', 'c']).toContain(await f.who());
  });
});
