import { isIP } from 'node:net';
import { unmapIpv4 } from './ipv4.js';
import { formatIpv6Groups, ipv6Groups } from './ipv6.js';

/**
 * PROXY protocol v1/v2 headers (haproxy doc/proxy-protocol.txt), built byte-exact so that the
 * caller can send each in one write before any payload. Shared by the data plane (tcp configs)
 * and any other L4 proxy in the project; the parser is for receivers and tests.
 */

const V2_SIGNATURE = Buffer.from([0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a]);


export interface ProxyEndpoints {
  srcIp: string;
  srcPort: number;
  dstIp: string;
  dstPort: number;
}

/** v1 text line; `PROXY UNKNOWN` when the two ends are not the same family. */
export function proxyV1(e: ProxyEndpoints): Buffer {
  const src = unmapIpv4(e.srcIp);
  const dst = unmapIpv4(e.dstIp);
  const fs = isIP(src);
  if (fs === 0 || fs !== isIP(dst)) return Buffer.from('PROXY UNKNOWN\r\n', 'latin1');
  return Buffer.from(`PROXY TCP${fs} ${src} ${dst} ${e.srcPort} ${e.dstPort}\r\n`, 'latin1');
}

function ipv6Bytes(ip: string, out: Buffer, at: number): void {
  const groups = ipv6Groups(ip) ?? [];
  for (let i = 0; i < 8; i++) out.writeUInt16BE(groups[i] ?? 0, at + i * 2);
}

/** v2 binary header, PROXY command, TCP over IPv4 (28 bytes) or IPv6 (52 bytes), no TLVs. */
export function proxyV2(e: ProxyEndpoints): Buffer {
  const src = unmapIpv4(e.srcIp);
  const dst = unmapIpv4(e.dstIp);
  const fs = isIP(src);
  if (fs === 0 || fs !== isIP(dst)) return proxyV2Local();
  const addrLen = fs === 4 ? 12 : 36;
  const buf = Buffer.alloc(16 + addrLen);
  V2_SIGNATURE.copy(buf, 0);
  buf[12] = 0x21;
  buf[13] = fs === 4 ? 0x11 : 0x21;
  buf.writeUInt16BE(addrLen, 14);
  if (fs === 4) {
    src.split('.').forEach((o, i) => (buf[16 + i] = Number(o)));
    dst.split('.').forEach((o, i) => (buf[20 + i] = Number(o)));
    buf.writeUInt16BE(e.srcPort, 24);
    buf.writeUInt16BE(e.dstPort, 26);
  } else {
    ipv6Bytes(src, buf, 16);
    ipv6Bytes(dst, buf, 32);
    buf.writeUInt16BE(e.srcPort, 48);
    buf.writeUInt16BE(e.dstPort, 50);
  }
  return buf;
}

/** v2 LOCAL command (health checks): the receiver uses the real endpoints. 16 bytes. */
export function proxyV2Local(): Buffer {
  const buf = Buffer.alloc(16);
  V2_SIGNATURE.copy(buf, 0);
  buf[12] = 0x20;
  buf[13] = 0x00;
  buf.writeUInt16BE(0, 14);
  return buf;
}

export type ParsedProxyHeader =
  | { version: 1 | 2; command: 'PROXY'; family: 'TCP4' | 'TCP6'; srcIp: string; srcPort: number; dstIp: string; dstPort: number; length: number }
  | { version: 1 | 2; command: 'LOCAL' | 'UNKNOWN'; length: number };

function formatV6(buf: Buffer, at: number): string {
  const groups: number[] = [];
  for (let i = 0; i < 8; i++) groups.push(buf.readUInt16BE(at + i * 2));
  // RFC 5952, as Node prints an address.
  return formatIpv6Groups(groups);
}

/**
 * Parses a header at the start of `buf`. Returns undefined when more bytes are needed; throws
 * on an invalid header (the receiver must then abort the connection).
 */
export function parseProxyHeader(buf: Buffer): ParsedProxyHeader | undefined {
  if (buf.length >= 12 && buf.subarray(0, 12).equals(V2_SIGNATURE)) {
    if (buf.length < 16) return undefined;
    if ((buf[12] & 0xf0) !== 0x20) throw new Error('PROXY v2: bad version');
    const len = buf.readUInt16BE(14);
    if (buf.length < 16 + len) return undefined;
    const cmd = buf[12] & 0x0f;
    if (cmd === 0) return { version: 2, command: 'LOCAL', length: 16 + len };
    if (cmd !== 1) throw new Error('PROXY v2: bad command');
    if (buf[13] === 0x11 && len >= 12) {
      const ip = (o: number) => `${buf[o]}.${buf[o + 1]}.${buf[o + 2]}.${buf[o + 3]}`;
      return { version: 2, command: 'PROXY', family: 'TCP4', srcIp: ip(16), dstIp: ip(20), srcPort: buf.readUInt16BE(24), dstPort: buf.readUInt16BE(26), length: 16 + len };
    }
    if (buf[13] === 0x21 && len >= 36) {
      return { version: 2, command: 'PROXY', family: 'TCP6', srcIp: formatV6(buf, 16), dstIp: formatV6(buf, 32), srcPort: buf.readUInt16BE(48), dstPort: buf.readUInt16BE(50), length: 16 + len };
    }
    return { version: 2, command: 'UNKNOWN', length: 16 + len };
  }
  const probe = buf.subarray(0, Math.min(buf.length, 6)).toString('latin1');
  if (!'PROXY '.startsWith(probe) && !probe.startsWith('PROXY ')) throw new Error('not a PROXY header');
  const end = buf.indexOf('\r\n');
  if (end < 0) {
    if (buf.length >= 107) throw new Error('PROXY v1: no CRLF within 107 bytes');
    return undefined;
  }
  if (end + 2 > 107) throw new Error('PROXY v1: line too long');
  const parts = buf.subarray(0, end).toString('latin1').split(' ');
  if (parts[1] === 'UNKNOWN') return { version: 1, command: 'UNKNOWN', length: end + 2 };
  if (parts.length !== 6 || (parts[1] !== 'TCP4' && parts[1] !== 'TCP6')) throw new Error('PROXY v1: malformed line');
  const fam = parts[1] === 'TCP4' ? 4 : 6;
  const port = (p: string) => {
    if (!/^(0|[1-9]\d{0,4})$/.test(p) || Number(p) > 65535) throw new Error(`PROXY v1: bad port ${p}`);
    return Number(p);
  };
  if (isIP(parts[2]) !== fam || isIP(parts[3]) !== fam) throw new Error('PROXY v1: bad address');
  return { version: 1, command: 'PROXY', family: parts[1], srcIp: parts[2], dstIp: parts[3], srcPort: port(parts[4]), dstPort: port(parts[5]), length: end + 2 };
}
