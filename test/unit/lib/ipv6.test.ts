import { describe, expect, it } from 'vitest';
import { formatIpv6, isIpv6, parseIpv6, parseIpv6Cidr } from '../../../lib/ipv6.js';

describe('lib/ipv6', () => {
  it('parses and prints addresses in the short form', () => {
    for (const [text, short] of [
      ['::1', '::1'], ['::', '::'], ['fd63:6170:6600::5', 'fd63:6170:6600::5'], ['FD63:6170:6600:0:0:0:0:0005', 'fd63:6170:6600::5'],
      ['2001:db8:0:0:1:0:0:1', '2001:db8::1:0:0:1'], ['2001:db8::', '2001:db8::'], ['1:2:3:4:5:6:7:8', '1:2:3:4:5:6:7:8'], ['1:0:3:4:5:6:7:8', '1:0:3:4:5:6:7:8'],
    ]) {
      const n = parseIpv6(text!);
      expect(n, text).toBeDefined();
      expect(formatIpv6(n!)).toBe(short);
    }
    expect(parseIpv6('::2')! - parseIpv6('::1')!).toBe(1n);
  });

  it('refuses what is not a plain IPv6 address', () => {
    for (const bad of ['', '1.2.3.4', '::ffff:1.2.3.4', 'fe80::1%lo', '1:2:3:4:5:6:7:8:9', 'g::1', ':::', '[::1]']) expect(isIpv6(bad), bad).toBe(false);
  });

  it('parses ranges on their boundary only', () => {
    expect(parseIpv6Cidr('fd63:6170:6600::/64')).toEqual({ network: parseIpv6('fd63:6170:6600::'), prefix: 64, size: 1n << 64n });
    expect(parseIpv6Cidr('::1/128')).toEqual({ network: 1n, prefix: 128, size: 1n });
    for (const bad of ['::1/127', 'fd00::1/64', 'fd00::/129', 'fd00::', 'fd00::/x', '10.0.0.0/8']) expect(parseIpv6Cidr(bad), bad).toBeUndefined();
  });
});
