/**
 * IPv4 addresses and CIDR ranges, the one copy every process uses: request validation, address
 * pools, allow lists and client addresses seen through dual-stack sockets.
 *
 * Parsing is strict (four decimal octets 0-255 without leading zeros, prefix 0-32) because the
 * control plane refuses anything else with a 400; later stages can then trust what they get.
 */

const DOTTED = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/;

/** The address as an unsigned 32-bit number, or undefined when `text` is not a dotted quad. */
export function parseIpv4(text: string): number | undefined {
  const m = DOTTED.exec(text);
  if (!m) return undefined;
  let n = 0;
  for (let i = 1; i <= 4; i++) {
    const octet = m[i]!;
    if (octet.length > 1 && octet.startsWith('0')) return undefined;
    const v = Number(octet);
    if (v > 255) return undefined;
    n = n * 256 + v;
  }
  return n;
}

export function formatIpv4(n: number): string {
  return [n >>> 24, (n >>> 16) & 255, (n >>> 8) & 255, n & 255].join('.');
}

export function isIpv4(text: string): boolean {
  return parseIpv4(text) !== undefined;
}

/** The netmask of a prefix length as an unsigned 32-bit number (`/0` is 0). */
export function prefixMask(prefix: number): number {
  return prefix === 0 ? 0 : (0xffffffff << (32 - prefix)) >>> 0;
}

export interface Ipv4Range {
  /** The network address (host bits cleared). */
  network: number;
  prefix: number;
  /** How many addresses the range spans, network and broadcast included. */
  size: number;
}

/** `a.b.c.d/n`, or a bare address meaning `/32`; undefined when malformed. */
export function parseCidr(text: string): Ipv4Range | undefined {
  const slash = text.indexOf('/');
  const ip = parseIpv4(slash < 0 ? text : text.slice(0, slash));
  if (ip === undefined) return undefined;
  let prefix = 32;
  if (slash >= 0) {
    const p = text.slice(slash + 1);
    if (!/^\d{1,2}$/.test(p) || Number(p) > 32) return undefined;
    prefix = Number(p);
  }
  return { network: (ip & prefixMask(prefix)) >>> 0, prefix, size: 2 ** (32 - prefix) };
}

export function isIpv4OrCidr(text: string): boolean {
  return parseCidr(text) !== undefined;
}

/** Whether `address` (dotted quad, or `::ffff:` mapped) lies in `range`. */
export function cidrContains(range: Ipv4Range, address: string): boolean {
  const ip = parseIpv4(unmapIpv4(address));
  if (ip === undefined) return false;
  return ((ip & prefixMask(range.prefix)) >>> 0) === range.network;
}

/**
 * `::ffff:1.2.3.4` is an IPv4 client seen through a dual-stack socket: report it as the IPv4
 * address, so allow lists, stickiness, throttles and PROXY headers all see one form.
 */
export function unmapIpv4(address: string): string {
  if (address.length > 7 && address.startsWith('::ffff:')) {
    const v4 = address.slice(7);
    if (DOTTED.test(v4)) return v4;
  }
  return address;
}
