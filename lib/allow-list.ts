import { cidrContains, parseCidr, type Ipv4Range } from './ipv4.js';

/**
 * allow_list semantics (docs/databases.md, "Database endpoints"): IPv4 addresses or CIDRs; empty allows nobody;
 * `0.0.0.0/0` allows everybody; a bare address means /32. Malformed entries are ignored here
 * (the control plane rejects them with a 400 before they reach a data plane or an agent). `::ffff:` mapped
 * client addresses count as their IPv4 address.
 */
export function compileAllowList(entries: string[]): (address: string) => boolean {
  const ranges = entries.map((e) => parseCidr(e.trim())).filter((r): r is Ipv4Range => r !== undefined);
  return (address: string) => ranges.some((r) => cidrContains(r, address));
}
