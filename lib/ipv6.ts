import { isIPv6 } from 'node:net';

/**
 * IPv6 addresses and ranges, for the NodeBalancers' IPv6 pool: parsed to a 128-bit number so a
 * pool can be walked, and printed in the short form of RFC 5952 (what the API shows). IPv4 stays
 * with lib/ipv4.ts; an IPv4-mapped address is not accepted here.
 */

/** The address as a 128-bit number, or undefined when `text` is not a plain IPv6 address. */
export function parseIpv6(text: string): bigint | undefined {
  if (!isIPv6(text) || text.includes('%') || text.includes('.')) return undefined;
  const [head, tail] = text.includes('::') ? text.split('::') as [string, string] : [text, undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  if (groups.length !== 8) return undefined;
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(parseInt(g, 16));
  return n;
}

export function isIpv6(text: string): boolean {
  return parseIpv6(text) !== undefined;
}

/** RFC 5952 text: lower case, no leading zeros, the longest run of two or more zero groups as `::`. */
export function formatIpv6(n: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((n >> BigInt(i * 16)) & 0xffffn));
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8;) {
    if (groups[i] !== 0) {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) {
      best = i;
      bestLen = j - i;
    }
    i = j;
  }
  const hex = groups.map((g) => g.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

export interface Ipv6Range {
  network: bigint;
  prefix: number;
  size: bigint;
}

/** `addr/prefix` with the address on the prefix boundary, or undefined. */
export function parseIpv6Cidr(text: string): Ipv6Range | undefined {
  const slash = text.indexOf('/');
  if (slash < 0) return undefined;
  const addr = parseIpv6(text.slice(0, slash));
  const p = text.slice(slash + 1);
  if (addr === undefined || !/^\d{1,3}$/.test(p) || Number(p) > 128) return undefined;
  const prefix = Number(p);
  const size = 1n << BigInt(128 - prefix);
  if (addr % size !== 0n) return undefined;
  return { network: addr, prefix, size };
}
