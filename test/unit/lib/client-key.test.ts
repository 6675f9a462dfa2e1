import { describe, expect, it } from 'vitest';
import { clientKey, isClientIpv6Prefix } from '../../../lib/client-key.js';
import { ipv6Groups } from '../../../lib/ipv6.js';

/** lib/client-key.ts: who "one client" is for every per-client limit (docs/security/traffic.md "Client keys"). */
describe('clientKey', () => {
  it('keeps an IPv4 address, unmaps an IPv4-mapped one, and keys IPv6 by its /64', () => {
    expect(clientKey('198.51.100.7')).toBe('198.51.100.7');
    expect(clientKey('::ffff:198.51.100.7')).toBe('198.51.100.7');
    expect(clientKey('2001:db8:1:2:aaaa:bbbb:cccc:dddd')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:DB8:1:2::1')).toBe('2001:db8:1:2::/64');
    expect(clientKey('2001:db8:1:3::1')).toBe('2001:db8:1:3::/64');
    expect(clientKey('fe80::1%eth0')).toBe('fe80::/64');
    expect(clientKey('::1')).toBe('::/64');
  });

  it('takes another prefix length, down to the bit', () => {
    expect(clientKey('2001:db8:1:2::1', 128)).toBe('2001:db8:1:2::1/128');
    expect(clientKey('2001:db8:1:2ff::1', 56)).toBe('2001:db8:1:200::/56');
    expect(clientKey('2001:db8:abcd:1::1', 33)).toBe('2001:db8:8000::/33');
    expect(clientKey('2001:db8:abcd:1::1', 48)).toBe('2001:db8:abcd::/48');
    // IPv4 is not affected by the IPv6 prefix.
    expect(clientKey('198.51.100.7', 48)).toBe('198.51.100.7');
    for (const ok of [1, 64, 128]) expect(isClientIpv6Prefix(ok)).toBe(true);
    for (const bad of [0, 129, 64.5, '64', -1]) expect(isClientIpv6Prefix(bad)).toBe(false);
  });

  it('leaves what is not an address as its own key', () => {
    expect(clientKey('')).toBe('');
    expect(clientKey('not:an:address')).toBe('not:an:address');
  });
});

describe('ipv6Groups (the one IPv6 expander)', () => {
  it('expands ::, an embedded dotted quad, and refuses zones and non-addresses', () => {
    expect(ipv6Groups('2001:db8::1')).toEqual([0x2001, 0xdb8, 0, 0, 0, 0, 0, 1]);
    expect(ipv6Groups('::')).toEqual([0, 0, 0, 0, 0, 0, 0, 0]);
    expect(ipv6Groups('::ffff:1.2.3.4')).toEqual([0, 0, 0, 0, 0, 0xffff, 0x102, 0x304]);
    expect(ipv6Groups('1:2:3:4:5:6:7:8')).toEqual([1, 2, 3, 4, 5, 6, 7, 8]);
    for (const bad of ['fe80::1%eth0', '1.2.3.4', '1:2:3:4:5:6:7:8:9', 'g::1', '']) expect(ipv6Groups(bad), bad).toBeUndefined();
  });
});
