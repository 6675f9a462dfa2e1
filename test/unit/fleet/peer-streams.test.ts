import { describe, expect, it } from 'vitest';
import { PeerStreams, type OpenStream } from '../../../control-plane/push/peer-streams.js';
import type { HostRole } from '../../../control-plane/domain/fleet/fleet-service.js';

/** A stream that records why it was ended. */
const stream = (role: HostRole, id: string, serial: string) => {
  const ended: string[] = [];
  const s: OpenStream = { role, id, serial, end: (r) => ended.push(r.message) };
  return { s, ended };
};

describe('PeerStreams: which open host streams a removal or a re-check ends', () => {
  it('kickHost ends every stream of that host, and only those', () => {
    const reg = new PeerStreams();
    const config = stream('dataplane', 'dp1', 'aa');
    const telemetry = stream('dataplane', 'dp1', 'aa');
    const other = stream('dataplane', 'dp2', 'bb');
    const sameIdAgent = stream('agent', 'dp1', 'cc');
    for (const x of [config, telemetry, other, sameIdAgent]) reg.add(x.s);
    expect(reg.kickHost('dataplane', 'dp1')).toBe(2);
    expect(config.ended).toEqual(['data plane dp1 was removed']);
    expect(telemetry.ended).toHaveLength(1);
    expect(other.ended).toEqual([]);
    expect(sameIdAgent.ended).toEqual([]);
    expect(reg.size).toBe(2);
    // Ended once: a second removal finds nothing.
    expect(reg.kickHost('dataplane', 'dp1')).toBe(0);
  });

  it('recheck asks once for the certified streams and ends those refused; insecure streams are not asked about', async () => {
    const reg = new PeerStreams();
    const good = stream('agent', 'a1', '01');
    const revoked = stream('agent', 'a2', '02');
    const insecure = stream('agent', 'a3', '');
    const unregister = reg.add(good.s);
    reg.add(revoked.s);
    reg.add(insecure.s);
    const asked: string[][] = [];
    const n = await reg.recheck({ refusedAmong: async (serials) => (asked.push(serials), new Set(['02'])) });
    expect(n).toBe(1);
    expect(asked).toEqual([['01', '02']]);
    expect(revoked.ended).toEqual(['the certificate of agent a2 is no longer valid']);
    expect(good.ended).toEqual([]);
    expect(insecure.ended).toEqual([]);
    unregister();
    expect(reg.size).toBe(1);
  });
});
