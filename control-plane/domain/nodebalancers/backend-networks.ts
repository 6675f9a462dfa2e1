import { networkInterfaces } from 'node:os';
import { cidrContains, parseCidr, parseIpv4, prefixMask, type Ipv4Range } from '../../../lib/ipv4.js';

/**
 * Where a NodeBalancer may send traffic (docs/security/api.md). A node address is a place the
 * data plane connects to and health-checks on a tenant's behalf, so an unrestricted address
 * would let any user with `add_nodebalancers` reach the operator's own services (the control
 * plane's ports, database nodes, cloud metadata) and read their state back through node health.
 *
 * The rule, in order:
 * 1. Fulcrum's own service addresses are always refused: the NodeBalancer and database endpoint
 *    pools, excluded networks, and the control plane's own listen addresses (ip:port).
 * 2. The address must lie in one of the backend networks (default: all of IPv4).
 * 3. Special ranges (0/8, loopback, link-local, multicast, reserved, broadcast) are refused
 *    unless a backend network inside that range contains the address, i.e. the operator named
 *    the range itself (the lab lists 127.0.0.0/8); a wider network such as 0.0.0.0/0 does not
 *    open them.
 */
export const specialRanges: readonly string[] = [
  '0.0.0.0/8', // "this network"; 0.0.0.0 reaches the local host
  '127.0.0.0/8', // loopback: the control plane, agents and databases on the data plane's host
  '169.254.0.0/16', // link-local: cloud metadata (169.254.169.254)
  '224.0.0.0/4', // multicast
  '240.0.0.0/4', // reserved, and 255.255.255.255 (broadcast)
];

function parseAll(list: readonly string[], what: string): Ipv4Range[] {
  return list.map((text) => {
    const r = parseCidr(text.trim());
    if (!r) throw new Error(`${what}: ${text} is not an IPv4 address or CIDR`);
    return r;
  });
}

const inside = (inner: Ipv4Range, outer: Ipv4Range): boolean =>
  inner.prefix >= outer.prefix && ((inner.network & prefixMask(outer.prefix)) >>> 0) === outer.network;

export interface BackendNetworkSettings {
  /** Networks backends may be in (CIDR list); undefined or empty = all of IPv4. */
  allowed?: readonly string[];
  /** Networks always refused, beyond the pools (e.g. the database hosts' network). */
  excluded?: readonly string[];
  /** Fulcrum's own address pools (NodeBalancer addresses, database endpoints). */
  servicePools: readonly string[];
}

/**
 * What validation asks (validation.ts): whether a syntactically valid `ip:port` may be a backend.
 * Without one, only the form of an address is checked.
 */
export interface BackendCheck {
  allowsAddress(address: string): boolean;
}

export class BackendNetworks implements BackendCheck {
  private readonly allowed: Ipv4Range[];
  private readonly refused: Ipv4Range[];
  private readonly special = parseAll(specialRanges, 'special range');
  /** `ip:port` of the control plane's own listeners, added once they are bound. */
  private readonly endpoints = new Set<string>();

  constructor(s: BackendNetworkSettings) {
    this.allowed = parseAll(s.allowed && s.allowed.length > 0 ? s.allowed : ['0.0.0.0/0'], 'backend network');
    this.refused = [...parseAll(s.servicePools, 'service pool'), ...parseAll(s.excluded ?? [], 'excluded backend network')];
  }

  /**
   * Refuses a listener of the control plane itself as a backend. A wildcard host listens on
   * every local address, so each of them (loopback included) is refused on that port.
   */
  refuseListener(host: string, port: number): void {
    const wildcard = host === '' || host === '0.0.0.0' || host === '::';
    const ips = wildcard
      ? ['127.0.0.1', ...Object.values(networkInterfaces()).flatMap((list) => (list ?? []).filter((a) => a.family === 'IPv4').map((a) => a.address))]
      : [host];
    for (const ip of ips) this.endpoints.add(`${ip}:${port}`);
  }

  allowsAddress(address: string): boolean {
    const colon = address.lastIndexOf(':');
    return this.allows(address.slice(0, colon), Number(address.slice(colon + 1)));
  }

  allows(ip: string, port: number): boolean {
    if (parseIpv4(ip) === undefined) return false;
    if (this.endpoints.has(`${ip}:${port}`)) return false;
    if (this.refused.some((r) => cidrContains(r, ip))) return false;
    const homes = this.allowed.filter((r) => cidrContains(r, ip));
    if (homes.length === 0) return false;
    const special = this.special.find((r) => cidrContains(r, ip));
    return !special || homes.some((home) => inside(home, special));
  }
}
