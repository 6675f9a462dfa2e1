// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { allOperations, validatedOperations } from '../../helpers/api-schema.js';

/**
 * Restricted users end to end over the API: an administrator creates a user, gives it a token
 * (Fulcrum-only endpoint, as there is no login), grants it NodeBalancer access through
 * /account/users/{username}/grants, and the grants decide 403 or 200.
 */
describe('account users and grants', () => {
  let api: ApiHarness;
  let nbId: number;
  let otherId: number;

  beforeAll(async () => {
    api = await startApi();
    nbId = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'users-nb' } })).body.id;
    otherId = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'users-other' } })).body.id;
  });
  afterAll(() => api.close());

  it('creates, lists, updates and validates users', async () => {
    const c = await api.req('POST', '/v4/account/users', { body: { username: 'ops-anna', email: 'anna@example.com' } });
    expect(c.status).toBe(200);
    expect(c.body).toEqual({
      username: 'ops-anna', email: 'anna@example.com', restricted: true, ssh_keys: [], tfa_enabled: false,
      verified_phone_number: null, password_created: null, last_login: null, user_type: 'default',
    });
    expect((await api.req('GET', '/v4/account/users/ops-anna')).body).toEqual(c.body);
    const list = await api.req('GET', '/v4/account/users');
    expect(list.body.data.map((u: any) => u.username)).toEqual(['admin', 'ops-anna']);
    expect((await api.req('GET', '/v4/account/users', { headers: { 'x-filter': '{"username":"admin"}' } })).body.results).toBe(1);
    const bad = await api.req('POST', '/v4/account/users', { body: { username: 'a__b', email: 'nope', restricted: 'yes' } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors.map((e: any) => e.field).sort()).toEqual(['email', 'restricted', 'username']);
    expect((await api.req('POST', '/v4/account/users', { body: { username: 'ops-anna', email: 'x@y.z' } })).body.errors[0].field).toBe('username');
    expect((await api.req('POST', '/v4/account/users', { body: {} })).body.errors.map((e: any) => e.field)).toEqual(['username', 'email']);
    const u = await api.req('PUT', '/v4/account/users/ops-anna', { body: { email: 'anna@corp.example' } });
    expect(u.body.email).toBe('anna@corp.example');
    expect((await api.req('GET', '/v4/account/users/nobody')).status).toBe(404);
    const self = await api.req('DELETE', '/v4/account/users/admin');
    expect({ status: self.status, body: self.body }).toEqual({ status: 400, body: { errors: [{ field: 'username', reason: 'You cannot delete yourself' }] } });
  });

  it('grants decide what a restricted user may do', async () => {
    const minted = await api.req('POST', '/v4/fulcrum/users/ops-anna/tokens', { body: { label: 'anna-cli', scopes: 'nodebalancers:read_write events:read_only' } });
    expect(minted.status).toBe(200);
    const token = minted.body.token as string;

    expect((await api.req('GET', '/v4/nodebalancers', { token })).body.results).toBe(0);
    expect((await api.req('GET', `/v4/nodebalancers/${nbId}`, { token })).status).toBe(403);
    expect((await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east' } })).status).toBe(403);

    const g0 = await api.req('GET', '/v4/account/users/ops-anna/grants');
    expect(g0.body.global.add_nodebalancers).toBe(false);
    expect(g0.body.nodebalancer).toEqual([
      { id: nbId, label: 'users-nb', permissions: null },
      { id: otherId, label: 'users-other', permissions: null },
    ]);
    expect(g0.body.linode).toEqual([]);

    const g1 = await api.req('PUT', '/v4/account/users/ops-anna/grants', { body: { nodebalancer: [{ id: nbId, permissions: 'read_only' }] } });
    expect(g1.status).toBe(200);
    expect(g1.body.nodebalancer[0]).toEqual({ id: nbId, label: 'users-nb', permissions: 'read_only' });
    expect((await api.req('GET', `/v4/nodebalancers/${nbId}`, { token })).status).toBe(200);
    expect((await api.req('PUT', `/v4/nodebalancers/${nbId}`, { token, body: { tags: ['mine'] } })).status).toBe(403);
    expect((await api.req('GET', `/v4/nodebalancers/${otherId}`, { token })).status).toBe(403);

    // Partial update: global changes, the nodebalancer grant stays.
    await api.req('PUT', '/v4/account/users/ops-anna/grants', { body: { global: { add_nodebalancers: true } } });
    const made = await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east', label: 'anna-made' } });
    expect(made.status).toBe(200);
    const mine = await api.req('GET', '/v4/profile/grants', { token });
    expect(mine.body.global.add_nodebalancers).toBe(true);
    expect(mine.body.nodebalancer).toEqual([
      { id: nbId, label: 'users-nb', permissions: 'read_only' },
      { id: made.body.id, label: 'anna-made', permissions: 'read_write' },
    ]);
    expect((await api.req('GET', '/v4/nodebalancers', { token })).body.results).toBe(2);

    await api.req('PUT', '/v4/account/users/ops-anna/grants', { body: { nodebalancer: [{ id: nbId, permissions: null }] } });
    expect((await api.req('GET', `/v4/nodebalancers/${nbId}`, { token })).status).toBe(403);

    // A restricted user manages no users; an unrestricted caller's /profile/grants is 204.
    expect((await api.req('GET', '/v4/account/users', { token })).status).toBe(401); // token lacks account scope
    const acct = (await api.req('POST', '/v4/fulcrum/users/ops-anna/tokens', { body: { scopes: 'account:read_write' } })).body.token;
    expect((await api.req('GET', '/v4/account/users', { token: acct })).status).toBe(403);
    expect((await api.req('POST', '/v4/fulcrum/users/admin/tokens', { token: acct, body: {} })).status).toBe(403);
    const adminGrants = await api.req('GET', '/v4/profile/grants');
    expect(adminGrants.status).toBe(204);
    expect(adminGrants.text).toBe('');

    // Deleting the user revokes its tokens.
    expect((await api.req('DELETE', '/v4/account/users/ops-anna')).body).toEqual({});
    expect((await api.req('GET', '/v4/nodebalancers', { token })).status).toBe(401);
  });

  it('rejects malformed grant updates and changes nothing', async () => {
    await api.req('POST', '/v4/account/users', { body: { username: 'ops-ben', email: 'ben@example.com' } });
    const before = api.snapshot();
    for (const [body, field] of [
      [{ nodebalancer: [{ id: 999999, permissions: 'read_only' }] }, 'nodebalancer[0].id'],
      [{ nodebalancer: [{ id: nbId, permissions: 'admin' }] }, 'nodebalancer[0].permissions'],
      [{ nodebalancer: {} }, 'nodebalancer'],
      [{ global: { add_nodebalancers: 'yes' } }, 'global.add_nodebalancers'],
      [{ global: { make_coffee: true } }, 'global.make_coffee'],
      [{ global: [] }, 'global'],
    ] as const) {
      const r = await api.req('PUT', '/v4/account/users/ops-ben/grants', { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0].field).toBe(field);
    }
    expect(api.snapshot()).toBe(before);
  });

  it('schema-checked every user and grant operation', () => {
    const ops = allOperations.filter((op) => / \/(account\/users|profile\/grants)/.test(op));
    expect(ops).toHaveLength(8);
    expect(ops.filter((op) => !validatedOperations.has(op))).toEqual([]);
  });
});
