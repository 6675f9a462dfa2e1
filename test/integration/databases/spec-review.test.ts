// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { MYSQL, firstEngine } from './helpers.js';

/** Mismatches found by reviewing the API against the managed-databases spec (000_*.txt). */
describe('databases API: spec review', () => {
  let api: ApiHarness;
  let engine: string;
  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
  });
  afterAll(async () => api?.close());

  it('lists the reduced form without port, replication_type, ssl_connection or disk sizes (spec 2.2)', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'db-reduced', region: 'us-east', type: 'g6-nanode-1', engine } });
    expect(created.status).toBe(200);
    // The full form keeps them.
    for (const key of ['port', 'replication_type', 'ssl_connection', 'total_disk_size_gb', 'used_disk_size_gb']) {
      expect(created.body, key).toHaveProperty(key);
    }
    for (const prefix of ['/v4', '/v4beta']) {
      const list = await api.req('GET', `${prefix}/databases/instances`);
      expect(list.status).toBe(200);
      const item = list.body.data.find((x: any) => x.id === created.body.id);
      for (const key of ['port', 'replication_type', 'ssl_connection', 'total_disk_size_gb', 'used_disk_size_gb']) {
        expect(item, `${prefix} ${key}`).not.toHaveProperty(key);
      }
      for (const key of ['allow_list', 'cluster_size', 'created', 'encrypted', 'engine', 'hosts', 'id', 'instance_uri', 'label', 'region', 'status', 'type', 'updated', 'updates', 'version']) {
        expect(item, `${prefix} ${key}`).toHaveProperty(key);
      }
    }
  });

  it('gives day_of_week an integer from the create on and refuses null for it (spec 2.3)', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'db-window', region: 'us-east', type: 'g6-nanode-1', engine } });
    expect(created.status).toBe(200);
    expect(created.body.updates).toEqual({ frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null, pending: [] });
    const listed = await api.req('GET', '/v4/databases/instances');
    expect(listed.body.data.find((x: any) => x.id === created.body.id).updates.day_of_week).toBe(7);
    const bad = await api.req('POST', MYSQL, { body: { label: 'db-window-2', region: 'us-east', type: 'g6-nanode-1', engine, updates: { day_of_week: null } } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([{ field: 'updates.day_of_week', reason: 'day_of_week must be an integer from 1 to 7' }]);
  });
});
