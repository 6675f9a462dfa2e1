// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

/** Mismatches found by reviewing the API against the NodeBalancer spec (001_*.txt). */
describe('NodeBalancer API: spec review', () => {
  let api: ApiHarness;
  let nb: number;
  beforeAll(async () => {
    api = await startApi();
    nb = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east' } })).body.id;
    expect((await api.req('POST', `/v4/nodebalancers/${nb}/configs`, { body: {} })).body.port).toBe(80);
  });
  afterAll(async () => api?.close());

  it('reports an out-of-range port once, not also as a duplicate of the default port 80', async () => {
    for (const port of [0, 65536]) {
      const r = await api.req('POST', `/v4/nodebalancers/${nb}/configs`, { body: { port } });
      expect(r.status).toBe(400);
      expect(r.body.errors).toEqual([{ field: 'port', reason: 'port must be between 1 and 65535' }]);
    }
    const cfg = (await api.req('POST', `/v4/nodebalancers/${nb}/configs`, { body: { port: 81 } })).body.id;
    const put = await api.req('PUT', `/v4/nodebalancers/${nb}/configs/${cfg}`, { body: { port: 70000 } });
    expect(put.body.errors).toEqual([{ field: 'port', reason: 'port must be between 1 and 65535' }]);
    // A real duplicate is still refused.
    const dup = await api.req('PUT', `/v4/nodebalancers/${nb}/configs/${cfg}`, { body: { port: 80 } });
    expect(dup.body.errors).toEqual([{ field: 'port', reason: 'Port must be unique.' }]);
  });
});
