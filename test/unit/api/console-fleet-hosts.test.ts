import { describe, expect, it } from 'vitest';
import { hostRow } from '../../../console/src/fleet-hosts.js';

/**
 * How the console's Fleet page reads an agent from GET /v4/fulcrum/agents (docs/console.md):
 * today's fields, the other spelling, a drain in any of the shapes the API may give it, and
 * anything missing or of the wrong type, without throwing.
 */
describe('the Fleet page\'s reading of an agent host', () => {
  it('reads today\'s agents API: state, region, members and recent events', () => {
    const h = hostRow({
      id: 'host-a', region: 'us-east', connected: true, state: 'up', appliedVersion: 7, lastSeen: 1_700_000_000_000, lostAt: null,
      members: [{ databaseId: 3, label: '<img src=x>', member: 2, role: 'replica', status: 'running' }, { databaseId: 4, label: 'b', member: 1, role: 'primary', status: null }],
      recentEvents: [{ id: 9, created: '2026-01-01T00:00:00', action: 'database_degraded', status: 'notification', entity: { id: 3, type: 'database', label: 'x' }, message: 'agent host-a' }],
    });
    expect(h).toMatchObject({ id: 'host-a', region: 'us-east', state: 'up', connected: true, draining: false, drain: '', appliedVersion: '7', lastSeen: 1_700_000_000_000 });
    expect(h.members).toEqual([
      { databaseId: 3, label: '<img src=x>', member: 2, role: 'replica', status: 'running' },
      { databaseId: 4, label: 'b', member: 1, role: 'primary', status: '' },
    ]);
    expect(h.events).toEqual([{ id: 9, created: '2026-01-01T00:00:00', action: 'database_degraded', status: 'notification', entity: 'database x', message: 'agent host-a' }]);
  });

  it('reads snake_case and an older API without members or events', () => {
    const h = hostRow({ id: 'h', region: '', connected: false, last_seen: '2026-01-01T00:00:00', applied_version: 2, members: [{ database_id: 5, label: 'l', index: 3, role: 'replica', state: 'stopped' }], recent_events: [] });
    expect(h).toMatchObject({ state: '', lastSeen: '2026-01-01T00:00:00', appliedVersion: '2', events: [] });
    expect(h.members).toEqual([{ databaseId: 5, label: 'l', member: 3, role: 'replica', status: 'stopped' }]);
    expect(hostRow({ id: 'old', connected: true })).toMatchObject({ members: [], events: [], draining: false });
  });

  it.each([
    [{ state: 'draining' }, true, ''],
    [{ state: 'up', draining: true }, true, ''],
    [{ state: 'up', draining: false }, false, ''],
    [{ state: 'up', drain: null }, false, ''],
    [{ state: 'up', drain: 'moving member 2 of db 7' }, true, 'moving member 2 of db 7'],
    [{ state: 'up', drain: { state: 'moving', moved: 2, total: 3, startedAt: 5, members: [1, 2] } }, true, 'state moving, moved 2, total 3, started at 5'],
    [{ state: 'up', drain: { percent_complete: 40, a: 1, b: 2, c: 3, d: 4, e: 5, f: 6 } }, true, 'percent complete 40, a 1, b 2, c 3, d 4, e 5'],
  ])('reads a drain given as %j', (raw, draining, drain) => {
    expect(hostRow({ id: 'h', ...raw })).toMatchObject({ draining, drain });
  });

  it('takes nonsense without throwing', () => {
    for (const raw of [null, 7, 'x', [], { id: 5, members: 'no', recentEvents: [null, 3, { entity: 'x' }], drain: [1] }]) {
      const h = hostRow(raw);
      expect(typeof h.id).toBe('string');
      expect(Array.isArray(h.members) && Array.isArray(h.events)).toBe(true);
    }
    expect(hostRow({ recentEvents: [null] }).events).toEqual([{ id: '', created: '', action: '', status: '', entity: '', message: '' }]);
  });
});
