// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldErrors, startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { MYSQL, firstEngine, eventsFor, waitStatus } from './helpers.js';
import { startScriptedAgent } from './scripted-agent.js';
import { hostCredentials } from '../../helpers/fleet.js';

/**
 * The database API without any agent: catalogue endpoints, request validation (issue 7
 * acceptance 5 at the API level) and the provisioning preconditions.
 */
describe('databases API: catalogue, validation and preconditions', () => {
  let api: ApiHarness;
  let engine: string;
  beforeAll(async () => {
    api = await startApi({ metricsPort: 0 });
    engine = await firstEngine(api);
  });
  afterAll(async () => api?.close());

  const valid = () => ({ label: 'db-one', region: 'us-east', type: 'g6-nanode-1', engine });

  it('lists engines publicly under mysql/<true version> and views them encoded and raw', async () => {
    const list = await api.req('GET', '/v4/databases/engines', { token: null });
    expect(list.status).toBe(200);
    expect(list.headers.get('x-accepted-oauth-scopes')).toBe('*');
    const e = list.body.data[0];
    expect(Object.keys(e).sort()).toEqual(['engine', 'id', 'version']);
    expect(e.engine).toBe('mysql');
    expect(e.id).toBe(`mysql/${e.version}`);
    expect(e.version).toMatch(/^\d+\.\d+\.\d+$/);
    for (const path of [`/v4/databases/engines/${encodeURIComponent(e.id)}`, `/v4beta/databases/engines/${e.id}`]) {
      const v = await api.req('GET', path, { token: null });
      expect(v.status, path).toBe(200);
      expect(v.body).toEqual(e);
    }
    expect((await api.req('GET', '/v4/databases/engines/mysql%2F1.2.3', { token: null })).status).toBe(404);
    expect((await api.req('GET', '/v4/databases/engines/mysql/1.2.3', { token: null })).status).toBe(404);
    const filtered = await api.req('GET', '/v4/databases/engines', { token: null, headers: { 'x-filter': JSON.stringify({ engine: 'postgresql' }) } });
    expect(filtered.body).toEqual({ data: [], page: 1, pages: 1, results: 0 });
  });

  it('lists the 19 types with prices per node count and views one', async () => {
    const list = await api.req('GET', '/v4/databases/types', { token: null });
    expect(list.body.results).toBe(19);
    const nano = await api.req('GET', '/v4/databases/types/g6-nanode-1', { token: null });
    expect(Object.keys(nano.body).sort()).toEqual(['class', 'disk', 'engines', 'id', 'label', 'memory', 'vcpus']);
    expect(nano.body.engines.mysql).toEqual([
      { quantity: 1, price: { hourly: 0.0225, monthly: 15 } },
      { quantity: 3, price: { hourly: 0.0525, monthly: 35 } },
    ]);
    // Only cluster sizes a create accepts are offered (2 is refused, below).
    expect(list.body.data.every((t: any) => t.engines.mysql.every((e: any) => e.quantity !== 2))).toBe(true);
    // Cloud Manager asks for {"platform": "rdbms-default"}.
    const platform = await api.req('GET', '/v4/databases/types', { token: null, headers: { 'x-filter': JSON.stringify({ platform: 'rdbms-default' }) } });
    expect(platform.body.results).toBe(19);
    expect((await api.req('GET', '/v4/databases/types/g6-nope', { token: null })).status).toBe(404);
  });

  it('refuses bad creates with 400 naming the field (issue 7 acceptance 5)', async () => {
    const cases: [Record<string, unknown>, string][] = [
      [{ ...valid(), engine: 'mysql/0.0.1' }, 'engine'],
      [{ ...valid(), engine: 'postgresql/14.6' }, 'engine'],
      [{ ...valid(), cluster_size: 2 }, 'cluster_size'],
      [{ ...valid(), cluster_size: 3, replication_type: 'none' }, 'replication_type'],
      [{ ...valid(), cluster_size: 1, replication_type: 'semi_synch' }, 'replication_type'],
      [{ ...valid(), replication_type: 'sync' }, 'replication_type'],
      [{ ...valid(), label: 'ab' }, 'label'],
      [{ ...valid(), label: 'a'.repeat(33) }, 'label'],
      [{ ...valid(), allow_list: ['10.0.0.300/24'] }, 'allow_list[0]'],
      [{ ...valid(), allow_list: ['127.0.0.2/32', '1.2.3.4/33'] }, 'allow_list[1]'],
      [{ ...valid(), allow_list: ['not-an-ip'] }, 'allow_list[0]'],
      [{ ...valid(), allow_list: '1.2.3.4' }, 'allow_list'],
      [{ ...valid(), type: 'g6-huge-1' }, 'type'],
      [{ ...valid(), region: 'mars-1' }, 'region'],
      [{ ...valid(), ssl_connection: 'yes' }, 'ssl_connection'],
      [{ ...valid(), updates: { frequency: 'daily' } }, 'updates.frequency'],
    ];
    for (const [body, field] of cases) {
      const r = await api.req('POST', MYSQL, { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(Object.keys(fieldErrors(r.body)), JSON.stringify(body)).toContain(field);
    }
    const missing = await api.req('POST', MYSQL, { body: {} });
    expect(Object.keys(fieldErrors(missing.body)).sort()).toEqual(['engine', 'label', 'region', 'type']);
    const notObject = await api.req('POST', MYSQL, { rawBody: '[1,2]' });
    expect({ status: notObject.status, body: notObject.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body must be a JSON object' }] } });
    const garbage = await api.req('POST', MYSQL, { rawBody: '{"label":' });
    expect({ status: garbage.status, body: garbage.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body is not valid JSON' }] } });
    expect((await api.req('GET', MYSQL)).body.results).toBe(0);
  });

  it('creates a provisioning database with the observed shape and refuses work until active', async () => {
    const r = await api.req('POST', MYSQL, { body: { ...valid(), allow_list: ['203.0.113.1', '192.0.2.0/24'] } });
    expect(r.status).toBe(200);
    const d = r.body;
    expect(Object.keys(d).sort()).toEqual([
      'allow_list', 'cluster_size', 'created', 'encrypted', 'engine', 'engine_config', 'fork', 'hosts', 'id', 'label', 'members', 'oldest_restore_time', 'platform', 'port', 'region',
      'replication_type', 'ssl_connection', 'status', 'total_disk_size_gb', 'type', 'updated', 'updates', 'used_disk_size_gb', 'version',
    ]);
    expect(d).toMatchObject({
      status: 'provisioning', engine: 'mysql', version: engine.split('/')[1], cluster_size: 1, replication_type: 'none',
      ssl_connection: true, encrypted: false, port: 3306, hosts: { primary: null, secondary: null, standby: null }, members: {},
      // Integers from the start (the 4.176 schema allows no null): the plan's disk, nothing used yet.
      allow_list: ['203.0.113.1', '192.0.2.0/24'], total_disk_size_gb: 25, used_disk_size_gb: 0,
      platform: 'rdbms-default', engine_config: { mysql: {} },
      updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 7, week_of_month: null, pending: [] },
    });
    expect(d.created).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d$/);

    const dup = await api.req('POST', MYSQL, { body: valid() });
    expect(fieldErrors(dup.body).label).toMatch(/unique/);

    const provisioning = 'Your database is provisioning; please wait until provisioning is complete to perform this operation.';
    const put = await api.req('PUT', `${MYSQL}/${d.id}`, { body: { label: 'renamed' } });
    expect(put.status).toBe(400);
    expect(put.body.errors[0].reason).toBe(provisioning);
    for (const [method, path, body] of [
      ['DELETE', `${MYSQL}/${d.id}`], ['GET', `${MYSQL}/${d.id}/credentials`], ['GET', `${MYSQL}/${d.id}/ssl`],
      ['POST', `${MYSQL}/${d.id}/credentials/reset`], ['POST', `${MYSQL}/${d.id}/patch`], ['GET', `${MYSQL}/${d.id}/backups`],
      ['POST', `${MYSQL}/${d.id}/backups`, { label: 'snap' }], ['POST', `${MYSQL}/${d.id}/suspend`],
    ] as [string, string, unknown?][]) {
      const x = await api.req(method, path, { body });
      expect(x.status, `${method} ${path}`).toBe(400);
      expect(x.body.errors[0].reason).toBe(provisioning);
    }
    const ev = await eventsFor(api, d.id, 'database_create');
    expect(ev).toHaveLength(1);
    expect(ev[0]).toMatchObject({ status: 'notification', percent_complete: null, entity: { id: d.id, type: 'database', label: 'db-one', url: `/v4/databases/mysql/instances/${d.id}` } });
  });

  it('takes a series id (mysql/<major>, as the v2 Terraform resource writes) for the newest build of that series', async () => {
    const list = (await api.req('GET', '/v4/databases/engines', { token: null })).body.data as { id: string; version: string }[];
    const major = engine.split('/')[1]!.split('.')[0]!;
    const newest = list.filter((e) => e.version.startsWith(`${major}.`)).at(-1)!;
    const r = await api.req('POST', MYSQL, { body: { ...valid(), label: 'db-series', engine: `mysql/${major}` } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ engine: 'mysql', version: newest.version });
    // A series nothing offers is still refused, naming the field.
    const none = await api.req('POST', MYSQL, { body: { ...valid(), label: 'db-series2', engine: 'mysql/99' } });
    expect(none.status).toBe(400);
    expect(fieldErrors(none.body).engine).toMatch(/not available/);
  });

  it('defaults replication to semi_synch for 3 nodes and lists both forms', async () => {
    const r = await api.req('POST', MYSQL, { body: { ...valid(), label: 'db-three', cluster_size: 3 } });
    expect(r.body).toMatchObject({ cluster_size: 3, replication_type: 'semi_synch' });
    const all = await api.req('GET', '/v4beta/databases/instances');
    const item = all.body.data.find((x: any) => x.id === r.body.id);
    expect(item.instance_uri).toBe(`/v4/databases/mysql/instances/${r.body.id}`);
    expect(item.replication_type).toBeUndefined();
    expect(item.ssl_connection).toBeUndefined();
    const filtered = await api.req('GET', MYSQL, { headers: { 'x-filter': JSON.stringify({ '+and': [{ label: 'db-three' }, { status: 'provisioning' }, { region: 'us-east' }, { type: 'g6-nanode-1' }, { engine: 'mysql' }, { version: engine.split('/')[1] }] }) } });
    expect(filtered.body.data.map((x: any) => x.id)).toEqual([r.body.id]);
    const bad = await api.req('GET', MYSQL, { headers: { 'x-filter': JSON.stringify({ port: 3306 }) } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors[0]).toEqual({ reason: 'Cannot filter on port', field: 'X-Filter' });
  });

  it('enforces scopes, the add_databases grant and unrestricted-only delete', async () => {
    const ro = await api.userToken('db-reader', { restricted: false, scopes: 'databases:read_only' });
    expect((await api.req('GET', MYSQL, { token: ro })).status).toBe(200);
    expect((await api.req('POST', MYSQL, { token: ro, body: { ...valid(), label: 'nope' } })).status).toBe(401);
    const list = (await api.req('GET', MYSQL)).body.data;
    expect((await api.req('GET', `${MYSQL}/${list[0].id}/backups`, { token: ro })).status).toBe(401);
    expect((await api.req('GET', MYSQL, { token: null })).status).toBe(401);

    const restricted = await api.userToken('db-restricted', { restricted: true });
    const denied = await api.req('POST', MYSQL, { token: restricted, body: { ...valid(), label: 'restricted-db' } });
    expect(denied.status).toBe(403);
    expect((await api.req('GET', MYSQL, { token: restricted })).body.results).toBe(0);
    api.setGrants('db-restricted', { global: { add_databases: true } });
    const ok = await api.req('POST', MYSQL, { token: restricted, body: { ...valid(), label: 'restricted-db' } });
    expect(ok.status).toBe(200);
    expect((await api.req('GET', MYSQL, { token: restricted })).body.data.map((x: any) => x.id)).toEqual([ok.body.id]);
    expect((await api.req('GET', `${MYSQL}/${list[0].id}`, { token: restricted })).status).toBe(403);
    expect((await api.req('DELETE', `${MYSQL}/${ok.body.id}`, { token: restricted })).status).toBe(403);
    expect((await api.req('GET', `${MYSQL}/999999`)).status).toBe(404);
    expect((await api.req('GET', `${MYSQL}/abc`)).status).toBe(404);
  });

  it('exposes databases by status as a metric', async () => {
    const text = await (await fetch(api.cp.metricsUrl!)).text();
    expect(text).toMatch(/^fulcrum_databases\{status="provisioning"[^}]*\} [1-9]/m);
  });

  it('never answers 500 to odd input', async () => {
    const odd: unknown[] = [null, 1, 'x', [], {}, { a: 1 }, [null], ['1.2.3.4', 5], { frequency: null }, -1, 1e308, true];
    const list = (await api.req('GET', MYSQL)).body.data;
    const id = list[0].id;
    for (const v of odd) {
      for (const key of ['label', 'region', 'type', 'engine', 'cluster_size', 'replication_type', 'allow_list', 'updates', 'encrypted', 'ssl_connection']) {
        const r = await api.req('POST', MYSQL, { body: { ...valid(), label: `odd-${key}`, [key]: v } });
        expect(r.status, `${key}=${JSON.stringify(v)}`).toBeLessThan(500);
      }
    }
    for (const q of ['?page=0', '?page=abc', '?page_size=5', '?page_size=501']) {
      const r = await api.req('GET', MYSQL + q);
      expect(r.status, q).toBe(400);
      expect(r.body.errors.map((e: { field?: string }) => e.field), q).toEqual([q.slice(1).split('=')[0]]);
    }
    const filter = await api.req('GET', MYSQL, { headers: { 'x-filter': '{"label":' } });
    expect({ status: filter.status, body: filter.body }).toEqual({ status: 400, body: { errors: [{ field: 'X-Filter', reason: 'Filter is not valid JSON' }] } });
    expect((await api.req('GET', `${MYSQL}/${id}/backups/abc`)).status).toBe(404);
    expect((await api.req('POST', `${MYSQL}/999/backups/1/restore`)).status).toBe(404);
    // A database still provisioning refuses every update before reading it, so the odd updates
    // go to an active one (a scripted agent makes it so; this is the file's last test).
    const agent = startScriptedAgent(api.cp.grpcAddress, { id: 'agent-odd', region: 'us-east', credentials: await hostCredentials(api.cp, 'agent', 'agent-odd', 'us-east') });
    try {
      await waitStatus(api, id, 'active');
      await oddUpdates(odd, id);
    } finally {
      agent.close();
    }
  });

  /**
   * PUTs and backups of odd values on an active database: never a 500; a refusal names the field
   * sent, and every field's validation is reached (some odd values are fine: null leaves a field
   * as it is, [] empties the allow_list, {} changes no update setting).
   */
  async function oddUpdates(odd: unknown[], id: number): Promise<void> {
    const names = (body: { errors?: { field?: string }[] }) => (body.errors ?? []).map((e) => (e.field ?? '').split(/[.[]/)[0]);
    const refusedFor = new Map<string, number>();
    for (const v of odd) {
      for (const key of ['label', 'allow_list', 'updates', 'type']) {
        const r = await api.req('PUT', `${MYSQL}/${id}`, { body: { [key]: v } });
        const seen = `${key}=${JSON.stringify(v)} ${JSON.stringify(r.body)}`;
        expect([200, 400], seen).toContain(r.status);
        if (r.status === 400) {
          expect(names(r.body), seen).toEqual([key]);
          refusedFor.set(key, (refusedFor.get(key) ?? 0) + 1);
        } else {
          // An accepted change is applied by the agent; the next update waits for active again.
          await waitStatus(api, id, 'active');
        }
      }
      const backup = await api.req('POST', `${MYSQL}/${id}/backups`, { body: { label: v, target: v } });
      expect(backup.status, JSON.stringify(backup.body)).toBe(400);
      expect(names(backup.body).length).toBeGreaterThan(0);
      expect(names(backup.body).every((f) => f === 'label' || f === 'target'), JSON.stringify(backup.body)).toBe(true);
    }
    for (const key of ['label', 'allow_list', 'updates', 'type']) expect(refusedFor.get(key) ?? 0, key).toBeGreaterThan(3);
  }
});
