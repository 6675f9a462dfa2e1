// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

/**
 * The wire format real clients depend on (issue 2 acceptance 5, linode-api.md §0 and §3):
 * 401 Invalid Token with X-OAuth-Scopes: unknown, 404 Not found, /v4beta like /v4,
 * Content-Type exactly application/json everywhere (checked by the harness on every response),
 * page_size bounds, and the headers of §3.5.
 */
describe('API wire format', () => {
  let api: ApiHarness;
  let nbId: number;

  beforeAll(async () => {
    api = await startApi();
    const r = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'wire-nb' } });
    expect(r.status).toBe(200);
    nbId = r.body.id;
  });
  afterAll(() => api.close());

  it.each([
    ['missing', null, undefined],
    ['unknown', 'f'.repeat(64), undefined],
    ['malformed', null, 'Token abc'],
    ['empty bearer', null, 'Bearer '],
  ])('a %s token gives 401 Invalid Token with X-OAuth-Scopes: unknown', async (_what, token, authorization) => {
    for (const path of ['/v4/nodebalancers', `/v4beta/nodebalancers/${nbId}`, '/v4/account/events', '/v4/profile/tokens']) {
      const r = await api.req('GET', path, { token, headers: authorization ? { authorization } : {} });
      expect(r.status).toBe(401);
      expect(r.body).toEqual({ errors: [{ reason: 'Invalid Token' }] });
      expect(r.headers.get('x-oauth-scopes')).toBe('unknown');
    }
    const w = await api.req('POST', '/v4/nodebalancers', { token, headers: authorization ? { authorization } : {}, body: { region: 'us-east' } });
    expect(w.status).toBe(401);
    // Authentication comes before the body is even parsed.
    const bad = await api.req('POST', '/v4/nodebalancers', { token, headers: authorization ? { authorization } : {}, rawBody: '{"region":' });
    expect(bad.status).toBe(401);
    expect(bad.body.errors[0].reason).toBe('Invalid Token');
  });

  it('an expired token is invalid', async () => {
    const auth = api.cp.context.auth;
    const admin = await auth.ensureAdmin();
    const { secret, record } = await auth.issueToken(admin.id, { label: 'short', scopes: '*', expiry: Date.now() + 60_000 });
    expect((await api.req('GET', '/v4/nodebalancers', { token: secret })).status).toBe(200);
    api.cp.context.db!.prepare('UPDATE tokens SET expiry = ? WHERE id = ?').run(Date.now() - 1000, record.id);
    const r = await api.req('GET', '/v4/nodebalancers', { token: secret });
    expect(r.status).toBe(401);
    expect(r.body.errors[0].reason).toBe('Invalid Token');
  });

  it('unknown ids and unknown paths give 404 Not found', async () => {
    const paths = [
      '/v4/nodebalancers/999999', `/v4/nodebalancers/${nbId}/configs/999999`, `/v4/nodebalancers/${nbId}/configs/999999/nodes`,
      `/v4/nodebalancers/${nbId}/configs/999999/nodes/1`, '/v4/nodebalancers/abc', '/v4/nodebalancers/0', '/v4/nodebalancers/-1',
      '/v4/nodebalancers/1.5', '/v4/nodebalancers/99999999999999999999999', '/v4/no/such/path', '/v4beta/nodebalancers/999999',
      '/v5/nodebalancers', '/', '/v4/account/events/999999', '/v4/profile/tokens/999999', '/v4/regions/nowhere',
      '/v4/nodebalancers/999999/stats', '/v4/nodebalancers/999999/firewalls',
    ];
    for (const p of paths) {
      const r = await api.req('GET', p);
      expect(r.status, p).toBe(404);
      expect(r.body, p).toEqual({ errors: [{ reason: 'Not found' }] });
    }
    for (const m of ['PUT', 'DELETE']) {
      const r = await api.req(m, '/v4/nodebalancers/999999', { body: {} });
      expect(r.status).toBe(404);
    }
  });

  it('/v4beta answers exactly like /v4', async () => {
    for (const p of ['/nodebalancers', `/nodebalancers/${nbId}`, `/nodebalancers/${nbId}/configs`, '/regions', '/nodebalancers/424242']) {
      const a = await api.req('GET', `/v4${p}`);
      const b = await api.req('GET', `/v4beta${p}`);
      expect(b.status).toBe(a.status);
      expect(b.body).toEqual(a.body);
    }
    const created = await api.req('POST', '/v4beta/nodebalancers', { body: { region: 'us-east', label: 'beta-made' } });
    expect(created.status).toBe(200);
    expect((await api.req('GET', `/v4/nodebalancers/${created.body.id}`)).body.label).toBe('beta-made');
    expect((await api.req('DELETE', `/v4beta/nodebalancers/${created.body.id}`)).body).toEqual({});
  });

  it('page_size outside 25..500 is a 400 naming page_size; page must be a positive integer', async () => {
    for (const size of ['10', '600', '24', '501', '0', 'abc', '-5', '1e2']) {
      const r = await api.req('GET', `/v4/nodebalancers?page_size=${size}`);
      expect(r.status, size).toBe(400);
      expect(r.body.errors[0].field).toBe('page_size');
    }
    for (const page of ['0', 'x', '-1']) {
      const r = await api.req('GET', `/v4/nodebalancers?page=${page}`);
      expect(r.status).toBe(400);
      expect(r.body.errors[0].field).toBe('page');
    }
    for (const size of ['25', '500', '100']) expect((await api.req('GET', `/v4/nodebalancers?page_size=${size}`)).status).toBe(200);
  });

  it('paginates with the real envelope: pages >= 1, page past the end is empty', async () => {
    const made: number[] = [];
    for (let i = 0; i < 30; i++) {
      made.push((await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: `page-nb-${i}` } })).body.id);
    }
    const all = (await api.req('GET', '/v4/nodebalancers')).body;
    expect(all.results).toBe(31);
    expect(all.pages).toBe(1);
    const p1 = (await api.req('GET', '/v4/nodebalancers?page=1&page_size=25')).body;
    const p2 = (await api.req('GET', '/v4/nodebalancers?page=2&page_size=25')).body;
    expect([p1.page, p1.pages, p1.results, p1.data.length]).toEqual([1, 2, 31, 25]);
    expect([p2.page, p2.pages, p2.results, p2.data.length]).toEqual([2, 2, 31, 6]);
    expect(new Set([...p1.data, ...p2.data].map((n: any) => n.id)).size).toBe(31);
    const past = (await api.req('GET', '/v4/nodebalancers?page=9&page_size=25')).body;
    expect([past.page, past.pages, past.results, past.data]).toEqual([9, 2, 31, []]);
    const emptyCfg = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs`)).body;
    expect(emptyCfg).toEqual({ data: [], page: 1, pages: 1, results: 0 });
    for (const id of made) await api.req('DELETE', `/v4/nodebalancers/${id}`);
  });

  it('sends the response headers of the real service', async () => {
    const r = await api.req('GET', '/v4/nodebalancers');
    const h = r.headers;
    expect(h.get('content-type')).toBe('application/json');
    expect(h.get('x-oauth-scopes')).toBe('*');
    expect(h.get('x-accepted-oauth-scopes')).toBe('nodebalancers:read_only');
    expect(h.get('x-spec-version')).toBe('4.176.0');
    expect(h.get('access-control-allow-origin')).toBe('*');
    expect(h.get('access-control-allow-headers')).toContain('X-Filter');
    expect(h.get('access-control-expose-headers')).toBe('X-OAuth-Scopes, X-Accepted-OAuth-Scopes, X-Status');
    expect(h.get('cache-control')).toBe('max-age=0, no-cache, no-store');
    expect(h.get('vary')).toBe('Authorization, X-Filter');
    expect(h.get('x-frame-options')).toBe('DENY');
    expect(h.get('x-content-type-options')).toBe('nosniff');
    expect(h.get('x-ratelimit-limit')).toBe('400');
    const w = await api.req('POST', '/v4/nodebalancers', { body: {} });
    expect(w.headers.get('x-accepted-oauth-scopes')).toBe('nodebalancers:read_write');
    const s = await api.req('GET', `/v4/nodebalancers/${nbId}/stats`);
    expect(s.headers.get('x-ratelimit-limit')).toBe('50');
    const regions = await api.req('GET', '/v4/regions', { token: null });
    expect(regions.status).toBe(200);
    expect(regions.headers.get('x-accepted-oauth-scopes')).toBe('*');
  });

  it('answers CORS preflight (OPTIONS) without a token', async () => {
    const r = await api.req('OPTIONS', `/v4/nodebalancers/${nbId}/configs`, {
      token: null, headers: { origin: 'https://cloud.example', 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization,x-filter' },
    });
    expect(r.status).toBe(200);
    expect(r.body).toEqual({});
    expect(r.headers.get('access-control-allow-methods')).toBe('HEAD, GET, OPTIONS, POST, PUT, DELETE');
    expect(r.headers.get('access-control-allow-headers')).toBe('Authorization, Origin, X-Requested-With, Content-Type, Accept, X-Filter');
    expect((await api.req('OPTIONS', '/v5/x', { token: null })).status).toBe(404);
  });

  it('creates answer 200 with the object and deletes answer 200 {} with Content-Length 2', async () => {
    const c = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'del-me' } });
    expect(c.status).toBe(200);
    const d = await api.req('DELETE', `/v4/nodebalancers/${c.body.id}`);
    expect(d.status).toBe(200);
    expect(d.text).toBe('{}');
    expect(d.headers.get('content-length')).toBe('2');
    expect((await api.req('DELETE', `/v4/nodebalancers/${c.body.id}`)).status).toBe(404);
  });

  it('timestamps are zone-less UTC seconds', async () => {
    const r = await api.req('GET', `/v4/nodebalancers/${nbId}`);
    expect(r.body.created).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/);
    expect(r.body.updated).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/);
  });

  it('malformed JSON, a non-object body, and a body on a form content type', async () => {
    const bad = await api.req('POST', '/v4/nodebalancers', { rawBody: '{"region": ' });
    expect({ status: bad.status, body: bad.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body is not valid JSON' }] } });
    const arr = await api.req('POST', '/v4/nodebalancers', { rawBody: '[1,2]' });
    expect({ status: arr.status, body: arr.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body must be a JSON object' }] } });
    const form = await api.req('POST', '/v4/nodebalancers', {
      rawBody: JSON.stringify({ region: 'us-east', label: 'form-typed' }),
      headers: { 'content-type': 'application/x-www-form-urlencoded' },
    });
    expect(form.status).toBe(200);
    const big = await api.req('POST', '/v4/nodebalancers', { rawBody: JSON.stringify({ region: 'us-east', tags: ['x'.repeat(2 * 1024 * 1024)] }) });
    expect({ status: big.status, body: big.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body is too large' }] } });
  });
});
