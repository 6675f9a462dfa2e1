import { isIPv6 } from 'node:net';

/**
 * IPv6 addresses and ranges, for the NodeBalancers' IPv6 pool: parsed to a 128-bit number so a
 * pool can be walked, and printed in the short form of RFC 5952 (what the API shows). IPv4 stays
 * with lib/ipv4.ts; an IPv4-mapped address is not accepted here.
 */

/**
 * The one IPv6 expander (the API's parsing, PROXY v2 headers, client keys): the eight 16-bit
 * groups of `text`, with `::` expanded and a trailing dotted quad (`::ffff:1.2.3.4`) read as the
 * last two groups; undefined when `text` is not an IPv6 address. A zone (`%eth0`) is not an
 * address and is refused here; callers that see one from a socket strip it first.
 */
export function ipv6Groups(text: string): number[] | undefined {
  if (text.includes('%') || !isIPv6(text)) return undefined;
  let body = text;
  const dotted = /(\d+)\.(\d+)\.(\d+)\.(\d+)$/.exec(body);
  if (dotted) {
    const [a, b, c, d] = dotted.slice(1).map(Number) as [number, number, number, number];
    body = `${body.slice(0, dotted.index)}${((a << 8) | b).toString(16)}:${((c << 8) | d).toString(16)}`;
  }
  const [head, tail] = body.includes('::') ? body.split('::') as [string, string] : [body, undefined];
  const left = head === '' ? [] : head.split(':');
  const right = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups = tail === undefined ? left : [...left, ...Array<string>(8 - left.length - right.length).fill('0'), ...right];
  if (groups.length !== 8) return undefined;
  return groups.map((g) => parseInt(g, 16));
}

/** The address as a 128-bit number, or undefined when `text` is not a plain IPv6 address. */
export function parseIpv6(text: string): bigint | undefined {
  // The API takes plain addresses only: no zone, no mapped or embedded IPv4.
  if (text.includes('%') || text.includes('.')) return undefined;
  const groups = ipv6Groups(text);
  if (groups === undefined) return undefined;
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(g);
  return n;
}

export function isIpv6(text: string): boolean {
  return parseIpv6(text) !== undefined;
}

/** RFC 5952 text: lower case, no leading zeros, the longest run of two or more zero groups as `::`. */
export function formatIpv6(n: bigint): string {
  const groups: number[] = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((n >> BigInt(i * 16)) & 0xffffn));
  return formatIpv6Groups(groups);
}

/** `formatIpv6` for eight 16-bit groups (what `ipv6Groups` returns). */
export function formatIpv6Groups(groups: readonly number[]): string {
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
