// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

const MYSQL = '/v4/databases/mysql/instances';

// Restricted users and database grants: grants can only name databases that exist, and they
// decide what a restricted user sees and may change.
describe('database grants for restricted users', () => {
  let api: ApiHarness;
  let dbId: number;
  beforeAll(async () => {
    api = await startApi();
    const engine = (await api.req('GET', '/v4/databases/engines')).body.data[0].id;
    const created = await api.req('POST', MYSQL, { body: { label: 'granted-db', region: 'us-east', type: 'g6-nanode-1', engine } });
    expect(created.status).toBe(200);
    dbId = created.body.id;
  });
  afterAll(() => api.close());

  it('lists databases in the grants and refuses ids that do not exist', async () => {
    await api.userToken('db-dana', { restricted: true, scopes: 'databases:read_write' });
    const g = await api.req('GET', '/v4/account/users/db-dana/grants');
    expect(g.body.database).toEqual([{ id: dbId, label: 'granted-db', permissions: null }]);
    const bad = await api.req('PUT', '/v4/account/users/db-dana/grants', { body: { database: [{ id: dbId + 1000, permissions: 'read_only' }] } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0].field).toBe('database[0].id');
  });

  it('a read_only grant lets the user read but not change or reset; no grant hides the database', async () => {
    const token = await api.userToken('db-eve', { restricted: true, scopes: 'databases:read_write' });
    expect((await api.req('GET', MYSQL, { token })).body.results).toBe(0);
    expect((await api.req('GET', `${MYSQL}/${dbId}`, { token })).status).toBe(403);
    expect((await api.req('POST', MYSQL, { token, body: { label: 'eve-db', region: 'us-east', type: 'g6-nanode-1', engine: 'mysql/x' } })).status).toBe(403);

    expect((await api.req('PUT', '/v4/account/users/db-eve/grants', { body: { database: [{ id: dbId, permissions: 'read_only' }] } })).status).toBe(200);
    expect((await api.req('GET', MYSQL, { token })).body.results).toBe(1);
    expect((await api.req('GET', `${MYSQL}/${dbId}`, { token })).status).toBe(200);
    expect((await api.req('PUT', `${MYSQL}/${dbId}`, { token, body: { label: 'renamed-db' } })).status).toBe(403);
    expect((await api.req('POST', `${MYSQL}/${dbId}/credentials/reset`, { token })).status).toBe(403);
    expect((await api.req('DELETE', `${MYSQL}/${dbId}`, { token })).status).toBe(403);
  });
});
