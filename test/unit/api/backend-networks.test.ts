import { describe, expect, it } from 'vitest';
import { BackendNetworks } from '../../../control-plane/domain/nodebalancers/backend-networks.js';

describe('backend networks', () => {
  const pools = ['127.77.0.0/16', '127.78.0.0/16'];
  it('by default allows any address but the special ranges and the pools', () => {
    const b = new BackendNetworks({ servicePools: pools });
    for (const ok of ['10.0.0.1', '192.168.1.1', '8.8.8.8', '172.31.255.254']) expect(b.allows(ok, 80), ok).toBe(true);
    for (const no of ['127.0.0.1', '0.0.0.0', '169.254.169.254', '224.0.0.1', '255.255.255.255', '240.1.1.1', '127.77.0.5']) expect(b.allows(no, 80), no).toBe(false);
  });

  it('opens a special range only when a listed network lies inside it; pools, exclusions and listeners stay refused', () => {
    const b = new BackendNetworks({ allowed: ['0.0.0.0/0', '127.0.0.0/8'], excluded: ['127.79.0.0/16'], servicePools: pools });
    b.refuseListener('127.0.0.1', 8081);
    expect(b.allows('127.0.0.1', 9000)).toBe(true);
    expect(b.allows('127.0.0.1', 8081)).toBe(false);
    expect(b.allows('127.79.0.1', 3306)).toBe(false);
    expect(b.allows('127.78.0.1', 3306)).toBe(false);
    expect(b.allows('169.254.169.254', 80)).toBe(false);
    expect(b.allowsAddress('127.0.0.2:1')).toBe(true);
    const wild = new BackendNetworks({ allowed: ['127.0.0.0/8'], servicePools: pools });
    wild.refuseListener('0.0.0.0', 8080);
    expect(wild.allows('127.0.0.1', 8080)).toBe(false);
    expect(() => new BackendNetworks({ allowed: ['10.0.0.0/33'], servicePools: pools })).toThrow(/10.0.0.0\/33/);
  });
});
