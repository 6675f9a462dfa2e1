import { isIPv4 } from 'node:net';
import { describe, expect, it } from 'vitest';
import { ErrorCollector, FulcrumError } from '../../../lib/errors.js';
import { isIpv4 } from '../../../lib/ipv4.js';
import { checkFields, checkValue, type FieldSpec } from '../../../control-plane/domain/validation/fields.js';
import { validateConfig, validateNode } from '../../../control-plane/domain/nodebalancers/validation.js';
import { validateCreate } from '../../../control-plane/domain/databases/validation.js';

const port: FieldSpec = {
  type: { is: 'integer', reason: 'port must be an integer' },
  range: { min: 1, max: 65535, reason: 'port must be between 1 and 65535' },
};

describe('field specs', () => {
  it('reports only the first rule a value breaks, in the order type, range, values, pattern, check', () => {
    const spec: FieldSpec = {
      type: { is: 'string', reason: 'type' },
      range: { min: 2, max: 4, reason: 'range' },
      oneOf: { values: ['abc', 'ab!', 'abcd'], reason: 'oneOf' },
      pattern: { re: /^[a-z]+$/, reason: 'pattern' },
      check: (v: string) => (v === 'abcd' ? 'check' : undefined),
    };
    const run = (v: unknown) => {
      const errs = new ErrorCollector();
      const out = checkValue(errs, 'f', v, spec);
      return { out, reasons: errs.errors.map((e) => e.reason) };
    };
    expect(run(5)).toEqual({ out: undefined, reasons: ['type'] });
    expect(run('a')).toEqual({ out: undefined, reasons: ['range'] });
    expect(run('xyz')).toEqual({ out: undefined, reasons: ['oneOf'] });
    expect(run('ab!')).toEqual({ out: undefined, reasons: ['pattern'] });
    expect(run('abcd')).toEqual({ out: undefined, reasons: ['check'] });
    expect(run('abc')).toEqual({ out: 'abc', reasons: [] });
  });

  it('treats null as a value, as absent, or as accepted, as the spec says', () => {
    const errs = new ErrorCollector();
    expect(checkValue(errs, 'a', null, port)).toBeUndefined();
    expect(checkValue(errs, 'b', null, { ...port, null: 'absent', required: 'b is required' })).toBeUndefined();
    expect(checkValue(errs, 'c', null, { ...port, null: 'value' })).toBeNull();
    expect(checkValue(errs, 'd', undefined, port)).toBeUndefined();
    expect(errs.errors).toEqual([{ field: 'a', reason: 'port must be an integer' }, { field: 'b', reason: 'b is required' }]);
  });

  it('collects every violation of a body with its field path, in the order of the specs', () => {
    const errs = new ErrorCollector();
    const reason = (v: unknown) => `${JSON.stringify(v)} is not a mode`;
    const out = checkFields(errs, { port: 0, mode: 'x', weight: 3 }, { port, mode: { oneOf: { values: ['a'], reason } }, weight: port }, 'configs[2]');
    expect(out).toEqual({ weight: 3 });
    expect(errs.errors).toEqual([
      { field: 'configs[2].port', reason: 'port must be between 1 and 65535' },
      { field: 'configs[2].mode', reason: '"x" is not a mode' },
    ]);
  });

  it('answers in the wire error shape, all violations of a NodeBalancer config together', () => {
    const errs = new ErrorCollector();
    validateConfig(errs, { port: 'x', protocol: 'sctp', check_interval: 1 }, 'configs[0]', []);
    validateNode(errs, { label: 'n', address: '10.0.0.1:99999' }, 'configs[0].nodes[0]');
    expect(() => errs.throwIfAny()).toThrow(FulcrumError);
    expect(errs.errors).toEqual([
      { field: 'configs[0].port', reason: 'port must be an integer' },
      { field: 'configs[0].protocol', reason: 'protocol must be one of http, https, tcp, udp' },
      { field: 'configs[0].check_interval', reason: 'check_interval must be between 2 and 3600' },
      { field: 'configs[0].nodes[0].label', reason: 'Label should be between 3 and 32 characters.' },
      { field: 'configs[0].nodes[0].address', reason: 'Port must be between 1 and 65535.' },
    ]);
  });
});

describe('IPv4 checks moved to lib/ipv4.ts', () => {
  const samples = ['1.2.3.4', '0.0.0.0', '255.255.255.255', '256.1.1.1', '01.2.3.4', '1.02.3.4', '1.2.3.00', '10.0.0.0', '999.1.1.1', '1.2.3.04'];

  it('accepts the same node addresses as node:net did (no leading zeros, octets 0-255)', () => {
    for (const s of samples) expect(isIpv4(s), s).toBe(isIPv4(s));
    const reasons = (address: string) => {
      const errs = new ErrorCollector();
      validateNode(errs, { label: 'node', address }, '');
      return errs.errors.map((e) => e.reason);
    };
    expect(reasons('10.0.0.1:80')).toEqual([]);
    expect(reasons('010.0.0.1:80')).toEqual(['Must be a valid IPv4 address followed by :port']);
  });

  it('refuses allow-list entries with leading zeros or a prefix over 32, as before', () => {
    const look = { engineExists: () => true, regionExists: () => true, typeExists: () => true, labelTaken: () => false };
    const body = { label: 'abc', region: 'r', type: 't', engine: 'e' };
    expect(validateCreate({ ...body, allow_list: ['10.0.0.0/8', '1.2.3.4'] }, look).allowList).toEqual(['10.0.0.0/8', '1.2.3.4']);
    try {
      validateCreate({ ...body, allow_list: ['01.2.3.4', '1.2.3.4/33', 7] }, look);
      expect.unreachable();
    } catch (e) {
      expect((e as FulcrumError).errors).toEqual([
        { field: 'allow_list[0]', reason: '"01.2.3.4" is not a valid IPv4 address or CIDR range' },
        { field: 'allow_list[1]', reason: '"1.2.3.4/33" is not a valid IPv4 address or CIDR range' },
        { field: 'allow_list[2]', reason: 'This entry is not a valid IPv4 address or CIDR range' },
      ]);
    }
  });
});
