import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

// Per-region address pools (docs/multi-host.md, "Address pools") through the API: a NodeBalancer
// gets its address from its region's pool, and a region without one is a 400 on region.
describe('NodeBalancer addresses from per-region pools', () => {
  let api: ApiHarness;
  const octet = 120 + Math.floor(Math.random() * 60);
  beforeAll(async () => {
    api = await startApi({ nodebalancerPool: `us-east=198.18.${octet}.0/24`, databasePool: `198.18.${octet + 70}.0/24` });
  });
  afterAll(async () => {
    await api?.close();
  });

  it('hands out the region pool and refuses a region without one', async () => {
    const ok = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'pool-east' } });
    expect(ok.status, JSON.stringify(ok.body)).toBe(200);
    expect(ok.body.ipv4).toMatch(new RegExp(`^198\\.18\\.${octet}\\.\\d+$`));

    const before = api.snapshot();
    const refused = await api.req('POST', '/v4/nodebalancers', { body: { region: 'lab-local', label: 'pool-lab' } });
    expect(refused.status).toBe(400);
    expect(refused.body.errors).toEqual([{ field: 'region', reason: 'No NodeBalancer addresses are configured for region lab-local' }]);
    // Nothing half-made is left behind.
    expect(api.snapshot()).toEqual(before);
  });

  it('refuses to start with overlapping pools', async () => {
    await expect(startApi({ nodebalancerPool: '198.18.200.0/24', databasePool: '198.18.200.128/25' })).rejects.toThrow('overlap');
  });
});
