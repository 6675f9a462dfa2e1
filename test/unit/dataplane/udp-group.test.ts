import { createSocket } from 'node:dgram';
import { afterEach, describe, expect, it } from 'vitest';
import { UdpGroups } from '../../../dataplane/workers/udp-group.js';

/** workers/udp-group.ts: the primary's reuseport groups (docs/dataplane.md "UDP on every worker"). */
const groups: UdpGroups[] = [];
afterEach(() => {
  while (groups.length > 0) groups.pop()!.close();
});

const ip = '127.119.3.4';
function group(size: number): UdpGroups {
  const g = new UdpGroups(size);
  groups.push(g);
  return g;
}

/** A free UDP port on `ip` (bound, then released). */
async function freePort(): Promise<number> {
  const s = createSocket('udp4');
  await new Promise<void>((r) => s.bind(0, ip, () => r()));
  const port = s.address().port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

describe('UdpGroups', () => {
  it('makes one SO_REUSEPORT socket per slot at once, gives each slot the same socket every time, and closes a port no longer served', async () => {
    const port = await freePort();
    const g = group(3);
    const zero = g.socket(ip, port, 0);
    expect(typeof zero).toBe('object');
    expect(g.socket(ip, port, 0)).toBe(zero);
    const two = g.socket(ip, port, 2);
    expect(typeof two).toBe('object');
    expect(two).not.toBe(zero);
    expect(g.socket(ip, port, 3)).toBe('no such worker slot');
    // Three sockets on one port: only SO_REUSEPORT allows that (UV_UDP_REUSEPORT is libuv's 64).
    // A socket without it is refused the port while the group holds it.
    const plain = createSocket('udp4');
    const err = await new Promise<NodeJS.ErrnoException | null>((r) => {
      plain.once('error', r);
      plain.bind({ port, address: ip, exclusive: true }, () => r(null));
    });
    expect(err?.code).toBe('EADDRINUSE');
    g.retain(new Set());
    expect(g.ports).toBe(0);
    const again = createSocket('udp4');
    await new Promise<void>((r) => again.bind({ port, address: ip, exclusive: true }, () => r()));
    again.close();
  });

  it('answers the bind error when the port is taken by a socket without SO_REUSEPORT', async () => {
    const holder = createSocket('udp4');
    await new Promise<void>((r) => holder.bind(0, ip, () => r()));
    try {
      expect(group(2).socket(ip, holder.address().port, 0)).toBe('EADDRINUSE');
    } finally {
      holder.close();
    }
  });
});
