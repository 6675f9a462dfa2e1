// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

/**
 * Scopes (401 for a missing scope), restricted users and grants (403), and personal access
 * tokens with scopes and expiry (issue 3 acceptance 5 and scope).
 */
describe('scopes, grants and tokens', () => {
  let api: ApiHarness;
  let nbId: number;
  let cfgId: number;
  let nodeId: number;

  beforeAll(async () => {
    api = await startApi();
    nbId = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'auth-nb' } })).body.id;
    cfgId = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 80 } })).body.id;
    nodeId = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes`, { body: { address: '10.0.0.1:80', label: 'node-1' } })).body.id;
  });
  afterAll(() => api.close());

  const reads = () => [
    '/v4/nodebalancers', `/v4/nodebalancers/${nbId}`, `/v4/nodebalancers/${nbId}/configs`, `/v4/nodebalancers/${nbId}/configs/${cfgId}`,
    `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes`, `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes/${nodeId}`,
    `/v4/nodebalancers/${nbId}/firewalls`,
  ];
  const writes = (): [string, string, unknown][] => [
    ['POST', '/v4/nodebalancers', { region: 'us-east' }],
    ['PUT', `/v4/nodebalancers/${nbId}`, { tags: ['x-tag'] }],
    ['POST', `/v4/nodebalancers/${nbId}/configs`, { port: 81 }],
    ['PUT', `/v4/nodebalancers/${nbId}/configs/${cfgId}`, { check_attempts: 4 }],
    ['POST', `/v4/nodebalancers/${nbId}/configs/${cfgId}/rebuild`, { nodes: [{ id: nodeId, address: '10.0.0.1:80', label: 'node-1' }] }],
    ['POST', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes`, { address: '10.0.0.2:80', label: 'node-2' }],
    ['PUT', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes/${nodeId}`, { weight: 9 }],
    ['DELETE', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes/${nodeId}`, undefined],
    ['DELETE', `/v4/nodebalancers/${nbId}/configs/${cfgId}`, undefined],
    ['DELETE', `/v4/nodebalancers/${nbId}`, undefined],
  ];

  it('a token without the nodebalancers scope gets 401 on every endpoint and changes nothing', async () => {
    const token = await api.userToken('scopeless', { restricted: false, scopes: 'databases:read_write events:read_only' });
    const before = api.snapshot();
    for (const p of reads()) {
      const r = await api.req('GET', p, { token });
      expect(r.status, p).toBe(401);
      expect(r.body).toEqual({ errors: [{ reason: 'Your OAuth token is not authorized to use this endpoint.' }] });
      expect(r.headers.get('x-oauth-scopes')).toBe('databases:read_write events:read_only');
      expect(r.headers.get('x-accepted-oauth-scopes')).toBe('nodebalancers:read_only');
    }
    for (const [m, p, body] of writes()) expect((await api.req(m, p, { token, body })).status, `${m} ${p}`).toBe(401);
    expect(api.snapshot()).toBe(before);
  });

  it('read_only reads but may not write; read_write and * do both', async () => {
    const ro = await api.userToken('reader', { restricted: false, scopes: 'nodebalancers:read_only' });
    for (const p of reads()) expect((await api.req('GET', p, { token: ro })).status, p).toBe(200);
    const before = api.snapshot();
    for (const [m, p, body] of writes()) {
      const r = await api.req(m, p, { token: ro, body });
      expect(r.status, `${m} ${p}`).toBe(401);
      expect(r.headers.get('x-accepted-oauth-scopes')).toBe('nodebalancers:read_write');
    }
    expect(api.snapshot()).toBe(before);
    const rw = await api.userToken('writer', { restricted: false, scopes: 'nodebalancers:read_write' });
    for (const p of reads()) expect((await api.req('GET', p, { token: rw })).status).toBe(200);
    const made = await api.req('POST', '/v4/nodebalancers', { token: rw, body: { region: 'us-east' } });
    expect(made.status).toBe(200);
    expect((await api.req('DELETE', `/v4/nodebalancers/${made.body.id}`, { token: rw })).status).toBe(200);
    // events need their own scope
    expect((await api.req('GET', '/v4/account/events', { token: rw })).status).toBe(401);
  });

  it('a restricted user without grants gets 403 and sees nothing', async () => {
    const token = await api.userToken('nogrants', { restricted: true });
    expect((await api.req('GET', '/v4/nodebalancers', { token })).body.results).toBe(0);
    const before = api.snapshot();
    for (const p of reads().slice(1)) {
      const r = await api.req('GET', p, { token });
      expect(r.status, p).toBe(403);
      expect(r.body).toEqual({ errors: [{ reason: 'Unauthorized' }] });
    }
    for (const [m, p, body] of writes()) expect((await api.req(m, p, { token, body })).status, `${m} ${p}`).toBe(403);
    expect(api.snapshot()).toBe(before);
    const events = await api.req('GET', '/v4/account/events', { token });
    expect(events.body.results).toBe(0);
    const someEvent = (await api.req('GET', '/v4/account/events')).body.data[0].id;
    expect((await api.req('GET', `/v4/account/events/${someEvent}`, { token })).status).toBe(404);
    expect((await api.req('POST', `/v4/account/events/${someEvent}/read`, { token })).status).toBe(404);
  });

  it('a read_only grant allows reads only; read_write allows changes; add_nodebalancers allows create', async () => {
    const token = await api.userToken('granted', { restricted: true, grants: { nodebalancer: { [String(nbId)]: 'read_only' } } });
    for (const p of reads()) expect((await api.req('GET', p, { token })).status, p).toBe(200);
    expect((await api.req('GET', '/v4/nodebalancers', { token })).body.data.map((n: any) => n.id)).toEqual([nbId]);
    const before = api.snapshot();
    for (const [m, p, body] of writes()) expect((await api.req(m, p, { token, body })).status, `${m} ${p}`).toBe(403);
    expect(api.snapshot()).toBe(before);
    expect((await api.req('GET', '/v4/account/events', { token })).body.results).toBeGreaterThan(0);

    api.setGrants('granted', { nodebalancer: { [String(nbId)]: 'read_write' } });
    const put = await api.req('PUT', `/v4/nodebalancers/${nbId}/configs/${cfgId}/nodes/${nodeId}`, { token, body: { weight: 3 } });
    expect(put.status).toBe(200);
    expect((await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east' } })).status).toBe(403);

    api.setGrants('granted', { global: { add_nodebalancers: true }, nodebalancer: { [String(nbId)]: 'read_write' } });
    const made = await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east', label: 'restricted-made' } });
    expect(made.status).toBe(200);
    // The creator gets read_write on what it made.
    expect((await api.req('PUT', `/v4/nodebalancers/${made.body.id}`, { token, body: { tags: ['mine'] } })).status).toBe(200);
    expect((await api.req('GET', '/v4/nodebalancers', { token })).body.results).toBe(2);
    expect((await api.req('DELETE', `/v4/nodebalancers/${made.body.id}`, { token })).status).toBe(200);
  });

  it('creates, lists, updates and revokes tokens with scopes and expiry', async () => {
    const c = await api.req('POST', '/v4/profile/tokens', { body: { label: 'ro-token', scopes: 'nodebalancers:read_only', expiry: '2099-12-31T23:59:59' } });
    expect(c.status).toBe(200);
    expect(c.body).toMatchObject({ label: 'ro-token', scopes: 'nodebalancers:read_only', expiry: '2099-12-31T23:59:59' });
    const secret = c.body.token as string;
    expect((await api.req('GET', '/v4/nodebalancers', { token: secret })).status).toBe(200);
    expect((await api.req('POST', '/v4/nodebalancers', { token: secret, body: { region: 'us-east' } })).status).toBe(401);
    // A read-only token may not mint broader tokens; `*` or no scopes copy the acting token's.
    expect((await api.req('POST', '/v4/profile/tokens', { token: secret, body: { label: 'x' } })).status).toBe(401);
    const acct = await api.userToken('acct', { restricted: false, scopes: 'account:read_write nodebalancers:read_only' });
    const up = await api.req('POST', '/v4/profile/tokens', { token: acct, body: { label: 'escalate', scopes: 'nodebalancers:read_write' } });
    expect(up.status).toBe(400);
    expect(up.body.errors[0].field).toBe('scopes');
    const same = await api.req('POST', '/v4/profile/tokens', { token: acct, body: { label: 'copy', scopes: '*' } });
    expect(same.body.scopes).toBe('account:read_write nodebalancers:read_only');
    const noExpiry = await api.req('POST', '/v4/profile/tokens', { body: {} });
    expect(noExpiry.body).toMatchObject({ expiry: null, scopes: '*', label: 'Personal Access Token' });

    for (const [body, field] of [
      [{ label: 'x'.repeat(101) }, 'label'], [{ label: '' }, 'label'], [{ scopes: 'nodebalancers:write' }, 'scopes'], [{ scopes: 7 }, 'scopes'],
      [{ expiry: 'tomorrow' }, 'expiry'], [{ expiry: '2001-01-01T00:00:00' }, 'expiry'],
    ] as const) {
      const r = await api.req('POST', '/v4/profile/tokens', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0].field).toBe(field);
    }

    const list = await api.req('GET', '/v4/profile/tokens');
    const listed = list.body.data.find((t: any) => t.id === c.body.id);
    expect(listed.token).toBe(secret.slice(0, 16));
    expect(list.body.data.every((t: any) => t.token.length <= 16)).toBe(true);
    const filtered = await api.req('GET', '/v4/profile/tokens', { headers: { 'x-filter': JSON.stringify({ label: 'ro-token' }) } });
    expect(filtered.body.data.map((t: any) => t.id)).toEqual([c.body.id]);
    expect((await api.req('PUT', `/v4/profile/tokens/${c.body.id}`, { body: { label: 'renamed' } })).body.label).toBe('renamed');
    // Another user's token is not found.
    const otherId = (await api.req('GET', '/v4/profile/tokens', { token: acct })).body.data[0].id;
    expect((await api.req('GET', `/v4/profile/tokens/${otherId}`)).status).toBe(404);

    expect((await api.req('DELETE', `/v4/profile/tokens/${c.body.id}`)).body).toEqual({});
    expect((await api.req('GET', '/v4/nodebalancers', { token: secret })).status).toBe(401);
    expect((await api.req('GET', `/v4/profile/tokens/${c.body.id}`)).status).toBe(404);
    // A revoked token's id is never handed out again.
    const next = await api.req('POST', '/v4/profile/tokens', { body: { label: 'after' } });
    expect(next.body.id).toBeGreaterThan(c.body.id);
    expect((await api.req('GET', '/v4/profile/tokens')).body.data.some((t: any) => t.id === c.body.id)).toBe(false);
  });
});
