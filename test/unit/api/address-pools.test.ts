import { describe, expect, it } from 'vitest';
import { AddressPools, assertDisjoint } from '../../../control-plane/domain/address-pools.js';
import { FulcrumError } from '../../../lib/errors.js';

describe('address pools per region', () => {
  it('keeps the single-CIDR form: one pool for every region', () => {
    const p = AddressPools.parse('127.77.0.0/16', 'NodeBalancer');
    expect(p.forRegion('us-east')).toBe('127.77.0.0/16');
    expect(p.forRegion('eu-west')).toBe('127.77.0.0/16');
    expect(p.cidrs()).toEqual(['127.77.0.0/16']);
  });

  it('gives named regions their own pool and the rest the bare one', () => {
    const p = AddressPools.parse('us-east=198.18.100.0/24, eu-west=198.18.101.0/24,127.77.0.0/16', 'NodeBalancer');
    expect(p.forRegion('us-east')).toBe('198.18.100.0/24');
    expect(p.forRegion('eu-west')).toBe('198.18.101.0/24');
    expect(p.forRegion('ap-south')).toBe('127.77.0.0/16');
    expect(p.cidrs().sort()).toEqual(['127.77.0.0/16', '198.18.100.0/24', '198.18.101.0/24']);
  });

  it('refuses a region without a pool with a 400 on region', () => {
    const p = AddressPools.parse('us-east=198.18.100.0/24', 'NodeBalancer');
    let err: unknown;
    try {
      p.forRegion('eu-west');
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(FulcrumError);
    expect((err as FulcrumError).code).toBe('validation');
    expect((err as FulcrumError).errors).toEqual([{ field: 'region', reason: 'No NodeBalancer addresses are configured for region eu-west' }]);
  });

  it.each([
    ['', 'none given'],
    ['198.18.100.0', 'expected'],
    ['198.18.100.0/31', 'expected'],
    ['us-east=nonsense', 'expected'],
    ['US East=198.18.0.0/24', 'bad region'],
    ['10.0.0.0/8,10.1.0.0/16', 'more than one pool without a region'],
    ['a=10.0.0.0/24,a=10.0.1.0/24', 'named twice'],
    ['a=10.0.0.0/16,b=10.0.1.0/24', 'overlap'],
  ])('refuses %j at start (%s)', (spec, words) => {
    expect(() => AddressPools.parse(spec, 'NodeBalancer')).toThrow(words);
  });

  it('refuses overlap between the NodeBalancer and database pools', () => {
    expect(() => assertDisjoint(['198.18.100.0/24', '198.18.100.128/25'], 'all')).toThrow('overlap');
    expect(() => assertDisjoint(['198.18.100.0/24', '198.18.101.0/24'], 'all')).not.toThrow();
  });
});
