import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

/**
 * `linode-cli configure` lists Linode plans and images before it saves anything and gives up on a
 * 404 (test/e2e/readme-linode-cli.test.ts runs the real one). This install runs no Linodes: both
 * lists are empty pages, public like /regions.
 */
describe('/linode/types and /images', () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(async () => api?.close());

  it('answers an empty page, with or without a token, on v4 and v4beta', async () => {
    for (const path of ['/v4/linode/types', '/v4/images', '/v4beta/linode/types', '/v4beta/images']) {
      for (const token of [undefined, null]) {
        const r = await api.req('GET', path, { token });
        expect(r.status, path).toBe(200);
        expect(r.body).toEqual({ data: [], page: 1, pages: 1, results: 0 });
      }
    }
    const pageSize = await api.req('GET', '/v4/images?page_size=1');
    expect({ status: pageSize.status, body: pageSize.body }).toEqual({ status: 400, body: { errors: [{ field: 'page_size', reason: 'page_size must be between 25 and 500' }] } });
    expect((await api.req('GET', '/v4/linode/types/g6-nanode-1')).status).toBe(404);
  });
});
