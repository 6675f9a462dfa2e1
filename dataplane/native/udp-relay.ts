import { existsSync } from 'node:fs';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The native udp datagram path (dataplane/native/udp_relay.c; docs/dataplane.md "UDP: the native
 * datagram path"), as the udp listener calls it. Ids are session numbers the relay hands out;
 * negative numbers returned are `-errno`. A number passed in (id, port, descriptor, epoch) that is
 * not an integer in its range throws a RangeError (a non-number a TypeError); IPv6 addresses may
 * carry a zone (`fe80::1%eth0`), as the relay hands link-local sources over.
 */
export interface UdpRelayAddon {
  create(
    fd: number,
    epoch: Int32Array,
    onDatagram: (msg: Buffer, address: string, port: number) => void,
    onReply: (id: number, msg: Buffer, address: string, port: number) => void,
    onError: (id: number, errno: number) => void,
  ): UdpRelayHandle;
  open(r: UdpRelayHandle, clientIp: string, clientPort: number, nodeIp: string, nodePort: number, connect: boolean): number;
  send(r: UdpRelayHandle, id: number, msg: Buffer): number;
  send(r: UdpRelayHandle, id: number, msg: Buffer, ip: string, port: number): number;
  reply(r: UdpRelayHandle, msg: Buffer, ip: string, port: number): number;
  establish(r: UdpRelayHandle, id: number, epoch: number): void;
  disconnect(r: UdpRelayHandle, id: number): number;
  /** `[id, bytes in, bytes out, ...]` of the sessions relayed in C since the last call. */
  collect(r: UdpRelayHandle): number[];
  /** The session's bytes in and out not yet collected. */
  close(r: UdpRelayHandle, id: number): [number, number];
  /** `[sessions, datagrams dropped, datagrams truncated]`. */
  stats(r: UdpRelayHandle): [number, number, number];
  destroy(r: UdpRelayHandle): void;
  /** Datagrams relayed in C so far, both directions, by every relay of this process. */
  relayed(): number;
  /**
   * `[dropped, truncated]` so far by every relay of this process: sends the kernel refused (`EAGAIN`,
   * a full send buffer, or another error) and truncated reads, all dropped.
   */
  drops(): [number, number];
}

/** An opaque native relay. */
export type UdpRelayHandle = { readonly __udpRelay: unique symbol };

/** Where scripts/build-native.mjs puts the binary: build/native under the package root. */
function findBinary(): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 6; i++) {
    const candidate = join(dir, 'build/native/udp_relay.node');
    if (existsSync(candidate)) return candidate;
    dir = dirname(dir);
  }
  return null;
}

function load(): { addon: UdpRelayAddon | null; error: string | null } {
  if (process.env.FULCRUM_UDP_NATIVE === '0') return { addon: null, error: 'turned off by FULCRUM_UDP_NATIVE=0' };
  const path = findBinary();
  if (path === null) return { addon: null, error: 'build/native/udp_relay.node not found (scripts/build-native.mjs did not build it)' };
  try {
    return { addon: createRequire(import.meta.url)(path) as UdpRelayAddon, error: null };
  } catch (e) {
    return { addon: null, error: `${path} does not load: ${(e as Error).message}` };
  }
}

const loaded = load();

/** The addon, or null when it is not built or does not load in this Node (then `udpRelayError` says why). */
export const udpRelay: UdpRelayAddon | null = loaded.addon;
export const udpRelayError: string | null = loaded.error;
