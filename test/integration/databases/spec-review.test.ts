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
});
