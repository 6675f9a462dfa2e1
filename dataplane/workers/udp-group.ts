import * as dgram from 'node:dgram';
import { getSystemErrorName } from 'node:util';
import type { PreparedSnapshot } from '../engine.js';

/**
 * libuv's UV_UDP_REUSEPORT (uv.h: 64), which Node does not export: SO_REUSEPORT on the socket.
 * Checked by udp-group.test.ts (two sockets bind one port with it, not without).
 */
const UV_UDP_REUSEPORT = 64;

/** A bound, not-reading UDP socket of the primary: node's native handle, passed to a worker whole. */
export type UdpHandle = object;

type CreateHandle = (address: string, port: number, type: 'udp4' | 'udp6', fd: number, flags: number) => UdpHandle | number;

/**
 * The one way to make a bound UDP socket that this process does not read: node:cluster's primary
 * holds its shared UDP sockets the same way (lib/internal/cluster/shared_handle.js). A
 * dgram.Socket would start reading at once and take datagrams meant for the workers. The call
 * is marked deprecated (DEP0112, underscore API) and warns once; the warning is not ours to
 * show to an operator, so it is silenced for this call only.
 */
function createHandle(address: string, port: number, type: 'udp4' | 'udp6'): UdpHandle | number {
  const create = (dgram as unknown as { _createSocketHandle: CreateHandle })._createSocketHandle;
  const quiet = process.noDeprecation;
  process.noDeprecation = true;
  try {
    return create(address, port, type, -1, UV_UDP_REUSEPORT);
  } finally {
    process.noDeprecation = quiet;
  }
}

/**
 * The reuseport groups of a multi-process data plane's udp ports (docs/dataplane.md "UDP on
 * every worker"): for each `ip:port`, one socket per worker slot, all bound with SO_REUSEPORT,
 * made together the first time any worker asks and held by the primary, which never reads them.
 * Worker k reads socket k (it gets a duplicate of it); the kernel picks a group member by a hash
 * of the 4-tuple over the number of sockets, so a flow stays with one socket, and so with slot k.
 *
 * Holding them here keeps that number constant: a reload's new worker k gets the same socket k,
 * and a dead worker's socket stays in the group (its datagrams wait in the socket's buffer for
 * the replacement). Were every worker to bind its own, a reload would double the group and then
 * halve it, and the kernel would move flows between sockets twice (a new session each time).
 */
export class UdpGroups {
  private readonly groups = new Map<string, UdpHandle[]>();

  constructor(private readonly size: number) {}

  /** Socket `slot` of `ip:port`'s group, or the bind error's code (EADDRINUSE, EADDRNOTAVAIL...). */
  socket(ip: string, port: number, slot: number): UdpHandle | string {
    const key = UdpGroups.key(ip, port);
    let group = this.groups.get(key);
    if (group === undefined) {
      const made: UdpHandle[] = [];
      for (let i = 0; i < this.size; i++) {
        const h = createHandle(ip, port, ip.includes(':') ? 'udp6' : 'udp4');
        if (typeof h === 'number') {
          for (const m of made) close(m);
          return getSystemErrorName(h);
        }
        made.push(h);
      }
      this.groups.set(key, (group = made));
    }
    const h = group[slot];
    return h === undefined ? 'no such worker slot' : h;
  }

  get ports(): number {
    return this.groups.size;
  }

  /** Closes the groups of ports no longer served (the workers closed their copies already). */
  retain(served: Pick<ReadonlySet<string>, 'has'>): void {
    for (const [key, group] of this.groups) {
      if (served.has(key)) continue;
      for (const h of group) close(h);
      this.groups.delete(key);
    }
  }

  close(): void {
    this.retain(new Set());
  }

  static key(ip: string, port: number): string {
    return `${ip}|${port}`;
  }
}

function close(h: UdpHandle): void {
  (h as { close(): void }).close();
}

/** The udp ports a state serves (UdpGroups keys); only walked while some udp port is held. */
export function udpPorts(state: PreparedSnapshot): Set<string> {
  const out = new Set<string>();
  for (const nb of state.nodebalancers) {
    for (const c of nb.configs) {
      if (c.protocol !== 'udp') continue;
      out.add(UdpGroups.key(c.ip, c.port));
      if (c.listenKey6 !== '') out.add(UdpGroups.key(c.ip6, c.port));
    }
  }
  return out;
}
