import { describe, expect, it } from 'vitest';
import { parseProxyHeader, proxyV1, proxyV2, proxyV2Local } from '../../../lib/proxy-protocol.js';

const sig = '0d0a0d0a000d0a515549540a';

describe('PROXY protocol headers', () => {
  it('v1 IPv4 and IPv6 lines are byte-exact', () => {
    expect(proxyV1({ srcIp: '192.168.0.1', srcPort: 56324, dstIp: '192.168.0.11', dstPort: 443 }).toString('latin1')).toBe('PROXY TCP4 192.168.0.1 192.168.0.11 56324 443\r\n');
    expect(proxyV1({ srcIp: '::ffff:10.0.0.1', srcPort: 1, dstIp: '10.0.0.2', dstPort: 80 }).toString('latin1')).toBe('PROXY TCP4 10.0.0.1 10.0.0.2 1 80\r\n');
    expect(proxyV1({ srcIp: '2001:db8::1', srcPort: 40000, dstIp: '2001:db8::2', dstPort: 8443 }).toString('latin1')).toBe('PROXY TCP6 2001:db8::1 2001:db8::2 40000 8443\r\n');
    expect(proxyV1({ srcIp: '2001:db8::1', srcPort: 1, dstIp: '10.0.0.2', dstPort: 2 }).toString('latin1')).toBe('PROXY UNKNOWN\r\n');
  });

  it('v2 IPv4 is 28 bytes: signature, 0x21, 0x11, length 12, addresses, ports', () => {
    const h = proxyV2({ srcIp: '192.168.0.1', srcPort: 56324, dstIp: '192.168.0.11', dstPort: 443 });
    expect(h.toString('hex')).toBe(`${sig}2111000c` + 'c0a80001' + 'c0a8000b' + 'dc04' + '01bb');
  });

  it('v2 IPv6 is 52 bytes with 16-byte addresses', () => {
    const h = proxyV2({ srcIp: '2001:db8::1', srcPort: 40000, dstIp: 'fe80::a:b:c:d', dstPort: 8443 });
    expect(h.length).toBe(52);
    expect(h.toString('hex')).toBe(`${sig}21210024` + '20010db8000000000000000000000001' + 'fe80000000000000000a000b000c000d' + '9c40' + '20fb');
    expect(parseProxyHeader(h)).toMatchObject({ family: 'TCP6', srcIp: '2001:db8::1', dstIp: 'fe80::a:b:c:d', srcPort: 40000, dstPort: 8443, length: 52 });
  });

  it('v2 LOCAL has command 0x20, family 0, length 0', () => {
    expect(proxyV2Local().toString('hex')).toBe(`${sig}20000000`);
    expect(parseProxyHeader(proxyV2Local())).toEqual({ version: 2, command: 'LOCAL', length: 16 });
  });

  it('the parser waits for a whole header and rejects garbage', () => {
    const h = proxyV2({ srcIp: '1.2.3.4', srcPort: 5, dstIp: '6.7.8.9', dstPort: 10 });
    expect(parseProxyHeader(h.subarray(0, 20))).toBeUndefined();
    expect(parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4'))).toBeUndefined();
    expect(() => parseProxyHeader(Buffer.from('GET / HTTP/1.1\r\n'))).toThrow('not a PROXY header');
    expect(() => parseProxyHeader(Buffer.from('PROXY TCP4 1.2.3.4 5.6.7.8 01 2\r\n'))).toThrow('PROXY v1: bad port 01');
  });
});
