import { unmapIpv4 } from './ipv4.js';
import { formatIpv6Groups, ipv6Groups } from './ipv6.js';

/**
 * Who "one client" is for every per-client limit (docs/security/traffic.md "Client keys"): the
 * data plane's caps, client_conn_throttle, client_udp_sess_throttle and new-session rate, the
 * database endpoints' caps, and the API's per-address rate limit.
 *
 * An IPv4 address is one client. An IPv6 host is routinely given a whole /64 (SLAAC, privacy
 * addresses, a /64 per VM), so keying on the full address let one host be 2^64 clients; it is
 * keyed by its prefix instead, /64 unless the operator says otherwise. Stickiness, the `source`
 * hash and X-Forwarded-For keep the full address: they name a client, they do not limit one.
 */
export const DEFAULT_CLIENT_IPV6_PREFIX = 64;

/** Whether `n` is a prefix length a client key may use (1-128). */
export function isClientIpv6Prefix(n: unknown): n is number {
  return typeof n === 'number' && Number.isInteger(n) && n >= 1 && n <= 128;
}

/**
 * The key of `address` (as a socket reports it): an IPv4 address as it is, an IPv4-mapped IPv6
 * address as its IPv4 address, an IPv6 address as its `/ipv6Prefix` network (`2001:db8:1:2::/64`;
 * a zone is dropped). Anything else (an empty address of a closed socket) is its own key.
 */
export function clientKey(address: string, ipv6Prefix = DEFAULT_CLIENT_IPV6_PREFIX): string {
  // The hot path: a plain IPv4 client costs one scan for a colon.
  if (!address.includes(':')) return address;
  const v4 = unmapIpv4(address);
  if (v4 !== address) return v4;
  const zone = address.indexOf('%');
  const groups = ipv6Groups(zone < 0 ? address : address.slice(0, zone));
  if (groups === undefined) return address;
  for (let i = 0; i < 8; i++) {
    const keep = Math.min(16, Math.max(0, ipv6Prefix - i * 16));
    groups[i] = keep === 0 ? 0 : groups[i]! & (0xffff << (16 - keep)) & 0xffff;
  }
  return `${formatIpv6Groups(groups)}/${ipv6Prefix}`;
}
