import { describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { validateSnapshot } from '../../../dataplane/config/validate.js';
import { StickyTable } from '../../../dataplane/sticky/sticky-table.js';
import { ConnThrottle } from '../../../dataplane/throttle/conn-throttle.js';
import { FulcrumError } from '../../../lib/errors.js';

describe('snapshot validation', () => {
  it('reports every problem with its field path', () => {
    try {
      validateSnapshot({
        version: 1,
        nodebalancers: [{ id: 1, ipv4: '127.0.0.1', configs: [
          { id: 1, port: 80, protocol: 'ftp', check: 'http_body', checkBody: '([', nodes: [{ id: 1, address: 'x:1', weight: 300 }] },
          { id: 2, port: 80, protocol: 'https', nodes: [] },
          { id: 3, port: 81, protocol: 'http', proxyProtocol: 'v1', nodes: [] },
        ] }],
      });
      expect.unreachable();
    } catch (e) {
      expect(e).toBeInstanceOf(FulcrumError);
      const err = e as FulcrumError;
      expect(err.code).toBe('invalid_config');
      const fields = err.errors.map((x) => x.field);
      expect(fields).toEqual(expect.arrayContaining([
        'nodebalancers[0].configs[0].protocol', 'nodebalancers[0].configs[0].check_body', 'nodebalancers[0].configs[0].nodes[0].address',
        'nodebalancers[0].configs[0].nodes[0].weight', 'nodebalancers[0].configs[1].port', 'nodebalancers[0].configs[1].ssl_cert',
        'nodebalancers[0].configs[2].proxy_protocol',
      ]));
    }
  });

  it('fills API defaults and parses IPv6 node addresses', () => {
    const s = validateSnapshot({ version: 2, nodebalancers: [{ id: 1, ipv4: '127.0.0.1', configs: [{ id: 1, port: 80, nodes: [{ id: 1, address: '[::1]:8080' }] }] }] });
    const c = s.nodebalancers[0].configs[0];
    expect(c).toMatchObject({ protocol: 'http', algorithm: 'roundrobin', check: 'none', checkIntervalMs: 31000, checkTimeoutMs: 30000, checkAttempts: 3, checkPassive: true });
    expect(c.nodes[0]).toMatchObject({ host: '::1', port: 8080, weight: 1, mode: 'accept' });
  });
});

describe('sticky table', () => {
  it('expires 30 minutes after the entry was added, even when used', () => {
    const clock = new ManualClock();
    const t = new StickyTable<string>(clock);
    t.set('1.1.1.1', 'a');
    clock.advance(29 * 60_000);
    expect(t.get('1.1.1.1')).toBe('a');
    clock.advance(60_000);
    expect(t.get('1.1.1.1')).toBeUndefined();
  });

  it('drops the entries of a node', () => {
    const t = new StickyTable<string>(new ManualClock());
    t.set('1.1.1.1', 'a');
    t.set('2.2.2.2', 'b');
    t.dropNode('a');
    expect(t.get('1.1.1.1')).toBeUndefined();
    expect(t.get('2.2.2.2')).toBe('b');
  });
});

describe('connection throttle', () => {
  it('admits N per sliding second per IP', () => {
    const clock = new ManualClock();
    const t = new ConnThrottle(3, clock);
    expect([1, 2, 3, 4].map(() => t.allow('a'))).toEqual([true, true, true, false]);
    expect(t.allow('b')).toBe(true);
    clock.advance(999);
    expect(t.allow('a')).toBe(false);
    clock.advance(1);
    expect(t.allow('a')).toBe(true);
    expect(new ConnThrottle(0, clock).allow('a')).toBe(true);
  });
});

describe('snapshot validation of garbage', () => {
  it('never throws anything but FulcrumError for wrongly shaped input', async () => {
    const { createProxyEngine } = await import('../../../dataplane/engine.js');
    const engine = createProxyEngine();
    const bad: unknown[] = [
      { version: 'x' },
      { version: 1, nodebalancers: 'nope' },
      { version: 1, nodebalancers: [{ id: 1, ipv4: '127.0.0.1', configs: [{ id: 1, port: 80, nodes: 5 }] }] },
      { version: 1, nodebalancers: [null] },
    ];
    for (const b of bad) {
      await expect(engine.apply(b as never)).rejects.toSatisfy((e: unknown) => e instanceof FulcrumError && e.code === 'invalid_config');
    }
    expect(engine.version()).toBe(0);
    await engine.close();
  });
});
