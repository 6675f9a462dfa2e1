import { describe, expect, it } from 'vitest';
import { Registry } from 'prom-client';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { ACTIVATION_WAIT_MS, ActivationGate, type RoutedDatabase } from '../../../control-plane/domain/databases/activation-gate.js';
import { RouteAcks } from '../../../control-plane/push/route-acks.js';
import { buildDatabaseEndpoints } from '../../../control-plane/push/endpoint-builder.js';
import type { SubscriberStatus, SubscriberStatusStore } from '../../../control-plane/push/snapshot-cache.js';
import { databaseRecord } from '../../helpers/database-record.js';

const db = (members: Record<string, string>): RoutedDatabase & { deleting: false } => ({
  ...databaseRecord({ region: 'us-east', hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2', port: 3306, allowList: ['0.0.0.0/0'], members }),
  id: 7, deleting: false,
});
const plane = (id: string, over: Partial<SubscriberStatus>): SubscriberStatus => ({
  id, region: '*', connected: true, replica: '', appliedVersion: 0, lastError: null, lastErrorAt: null, lastSeen: 0, ...over,
});
const store = (rows: SubscriberStatus[]): SubscriberStatusStore => ({
  get: async (id) => rows.find((r) => r.id === id),
  put: async () => undefined,
  list: async () => rows,
  release: async () => undefined,
});

describe('RouteAcks (which data planes applied a database\'s routes)', () => {
  const running = db({ '127.79.0.1': 'primary' });
  const round = (members: Record<string, string>) => buildDatabaseEndpoints([{ ...db(members), id: 7 } as never]);

  it('waits for connected data planes of the region whose ACKed version is older than the one the routes appeared in', async () => {
    const rows = [
      plane('behind', { appliedVersion: 4 }),
      plane('applied', { appliedVersion: 5 }),
      plane('ahead', { appliedVersion: 9 }),
      plane('nacked', { appliedVersion: 4, lastError: 'cannot listen on 127.78.0.1:3306: EADDRINUSE' }),
      plane('away', { appliedVersion: 1, connected: false }),
      plane('elsewhere', { appliedVersion: 1, region: 'eu-west' }),
    ];
    const acks = new RouteAcks(store(rows));
    acks.record(round({}), 3);
    acks.record(round({ '127.79.0.1': 'primary' }), 5);
    // A later round with the same routes keeps the version they appeared in.
    acks.record(round({ '127.79.0.1': 'primary' }), 6);
    expect(await acks.pending(running)).toEqual({ waiting: ['behind'], refusing: ['nacked'] });
  });

  it('waits for every connected data plane while no round holds the routes yet, and for none when none is connected', async () => {
    const acks = new RouteAcks(store([plane('a', { appliedVersion: 8 }), plane('b', { appliedVersion: 8 })]));
    acks.record(round({}), 8);
    expect((await acks.pending(running)).waiting).toEqual(['a', 'b']);
    expect(await new RouteAcks(store([plane('a', { connected: false })])).pending(running)).toEqual({ waiting: [], refusing: [] });
  });

  it('opens a restored database\'s routes once its restore operation is no longer pending', () => {
    const dbs = [{ ...db({ '127.79.0.1': 'primary' }), id: 7, status: 'restoring' } as never];
    expect(buildDatabaseEndpoints(dbs, new Set([7])).every((e) => e.ep.targets!.length === 0)).toBe(true);
    expect(buildDatabaseEndpoints(dbs).every((e) => e.ep.targets!.length === 1)).toBe(true);
  });
});

describe('ActivationGate', () => {
  it('holds a database until its routes are applied, and at most ACTIVATION_WAIT_MS, counting the data plane it did not wait out', async () => {
    const clock = new ManualClock();
    const registry = new Registry();
    let waiting = ['dp-wedged'];
    const gate = new ActivationGate({ routes: { pending: async () => ({ waiting, refusing: [] }) }, clock, logger: silentLogger(), registry });
    const d = db({ '127.79.0.1': 'primary' });
    expect(await gate.mayActivate(d)).toBe(false);
    clock.advance(ACTIVATION_WAIT_MS - 1);
    expect(await gate.mayActivate(d)).toBe(false);
    clock.advance(1);
    expect(await gate.mayActivate(d)).toBe(true);
    expect(await registry.getSingleMetricAsString('fulcrum_database_activations_unconfirmed_total')).toContain('dataplane="dp-wedged"} 1');
    // A new wait starts afresh; applied routes open it at once.
    expect(await gate.mayActivate(d)).toBe(false);
    waiting = [];
    expect(await gate.mayActivate(d)).toBe(true);
    expect(await new ActivationGate({ clock, logger: silentLogger() }).mayActivate(d)).toBe(true);
  });
});
