import { describe, expect, it } from 'vitest';
import { cidrContains, formatIpv4, isIpv4, isIpv4OrCidr, parseCidr, parseIpv4, prefixMask, unmapIpv4 } from '../../../lib/ipv4.js';

describe('lib/ipv4', () => {
  it('parses dotted quads strictly', () => {
    expect(parseIpv4('10.1.2.3')).toBe(0x0a010203);
    expect(parseIpv4('255.255.255.255')).toBe(0xffffffff);
    for (const bad of ['256.1.1.1', '1.2.3', '01.2.3.4', '1.2.3.4 ', 'a.b.c.d', '', '1.2.3.4/8']) expect(parseIpv4(bad), bad).toBeUndefined();
    expect(formatIpv4(0xc0a80001)).toBe('192.168.0.1');
    expect(isIpv4('127.0.0.1')).toBe(true);
  });

  it('parses CIDRs, a bare address being /32, and clears host bits', () => {
    expect(parseCidr('10.1.2.3/8')).toEqual({ network: 0x0a000000, prefix: 8, size: 2 ** 24 });
    expect(parseCidr('10.1.2.3')).toEqual({ network: 0x0a010203, prefix: 32, size: 1 });
    expect(parseCidr('0.0.0.0/0')).toEqual({ network: 0, prefix: 0, size: 2 ** 32 });
    for (const bad of ['10.0.0.0/33', '10.0.0.0/', '10.0.0.0/-1', '10.0.0/8', '10.0.0.0/8/8']) expect(isIpv4OrCidr(bad), bad).toBe(false);
    expect(prefixMask(0)).toBe(0);
    expect(prefixMask(24)).toBe(0xffffff00);
    expect(prefixMask(32)).toBe(0xffffffff);
  });

  it('tests membership, mapped addresses included', () => {
    const r = parseCidr('198.18.0.0/15')!;
    expect(cidrContains(r, '198.19.255.254')).toBe(true);
    expect(cidrContains(r, '::ffff:198.18.0.9')).toBe(true);
    expect(cidrContains(r, '198.20.0.1')).toBe(false);
    expect(cidrContains(r, '::1')).toBe(false);
    expect(cidrContains(parseCidr('0.0.0.0/0')!, '8.8.8.8')).toBe(true);
  });

  it('unmaps ::ffff: IPv4 addresses only', () => {
    expect(unmapIpv4('::ffff:127.0.0.1')).toBe('127.0.0.1');
    expect(unmapIpv4('127.0.0.1')).toBe('127.0.0.1');
    expect(unmapIpv4('::ffff:abcd')).toBe('::ffff:abcd');
    expect(unmapIpv4('::1')).toBe('::1');
  });
});
