// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';

/**
 * X-Filter on the NodeBalancer list (label, region, ipv4, tags; ordering; errors), the events
 * every change writes, filtered the way linodego/Terraform and the CLI send filters, and the
 * lifecycle of addresses and ids.
 */
describe('X-Filter, events and lifecycle', () => {
  let api: ApiHarness;
  const ids: Record<string, number> = {};
  const ipv4: Record<string, string> = {};

  const list = async (filter: unknown, path = '/v4/nodebalancers') => {
    const r = await api.req('GET', path, { headers: { 'x-filter': typeof filter === 'string' ? filter : JSON.stringify(filter) } });
    return r;
  };
  const labels = async (filter: unknown) => {
    const r = await list(filter);
    expect(r.status, JSON.stringify(filter)).toBe(200);
    return r.body.data.map((n: any) => n.label);
  };

  beforeAll(async () => {
    api = await startApi();
    for (const [label, region, tags] of [['alpha', 'us-east', ['web', 'prod']], ['bravo', 'lab-local', ['web']], ['charlie', 'us-east', []], ['delta', 'lab-local', ['dbs', 'prod']]] as const) {
      const r = await api.req('POST', '/v4/nodebalancers', { body: { label, region, tags } });
      ids[label] = r.body.id;
      ipv4[label] = r.body.ipv4;
    }
  });
  afterAll(() => api.close());

  it('filters on label, region, ipv4 and tags with operators', async () => {
    expect(await labels({ label: 'bravo' })).toEqual(['bravo']);
    expect(await labels({ region: 'us-east' })).toEqual(['alpha', 'charlie']);
    expect(await labels({ ipv4: ipv4.delta })).toEqual(['delta']);
    expect(await labels({ tags: 'prod' })).toEqual(['alpha', 'delta']);
    expect(await labels({ tags: { '+contains': 'we' } })).toEqual(['alpha', 'bravo']);
    expect(await labels({ label: { '+contains': 'a' }, region: 'lab-local' })).toEqual(['bravo', 'delta']);
    expect(await labels({ label: { '+neq': 'alpha' } })).toEqual(['bravo', 'charlie', 'delta']);
    expect(await labels({ '+or': [{ label: 'alpha' }, { tags: 'dbs' }] })).toEqual(['alpha', 'delta']);
    expect(await labels({ '+and': [{ region: 'us-east' }, { tags: 'web' }] })).toEqual(['alpha']);
    expect(await labels({ label: { '+gte': 'c' } })).toEqual(['charlie', 'delta']);
    expect(await labels({ '+and': [{ label: 'alpha' }, { label: 'bravo' }] })).toEqual([]);
    // The CLI's shape: +and of single-key objects plus ordering.
    expect(await labels({ '+and': [{ region: 'lab-local' }], '+order_by': 'label', '+order': 'desc' })).toEqual(['delta', 'bravo']);
    expect(await labels({ '+order_by': 'region' })).toEqual(['bravo', 'delta', 'alpha', 'charlie']);
    expect(await labels({})).toEqual(['alpha', 'bravo', 'charlie', 'delta']);
    // The Terraform provider's list data sources with no filter block: an empty +and is everything.
    expect(await labels({ '+and': [], '+order': 'desc' })).toEqual(['alpha', 'bravo', 'charlie', 'delta']);
    expect(await labels({ '+and': [], '+order_by': 'label', '+order': 'desc' })).toEqual(['delta', 'charlie', 'bravo', 'alpha']);
    // Filtering applies before pagination.
    const paged = await api.req('GET', '/v4/nodebalancers?page=1&page_size=25', { headers: { 'x-filter': '{"tags":"prod"}' } });
    expect([paged.body.results, paged.body.pages]).toEqual([2, 1]);
  });

  it('rejects unfilterable fields and malformed filters with field X-Filter', async () => {
    for (const [filter, reason] of [
      [{ id: 1 }, 'Cannot filter on id'], [{ hostname: 'x' }, 'Cannot filter on hostname'], [{ client_conn_throttle: 0 }, 'Cannot filter on client_conn_throttle'],
      [{ '+order_by': 'created' }, 'Cannot filter on created'], [{ '+or': [{ transfer: 1 }] }, 'Cannot filter on transfer'],
    ] as const) {
      const r = await list(filter);
      expect(r.status).toBe(400);
      expect(r.body).toEqual({ errors: [{ reason, field: 'X-Filter' }] });
    }
    for (const bad of ['{', 'null', '[]', '"label"', '{"label":{"+like":"a"}}', '{"+xor":[]}', '{"+and":{}}', '{"+or":[]}', '{"label":[1]}',
      '{"+order":"up","+order_by":"label"}', '{"+order_by":5}', '{"label":{"+gt":{}}}', '{"label":{"+contains":1}}', `{"label":"${'x'.repeat(9000)}"}`,
      '{"+and":[{"+and":[{"+and":[{"+and":[{"+and":[{"+and":[{"+and":[{"+and":[{"+and":[{"label":"a"}]}]}]}]}]}]}]}]}]}']) {
      const r = await list(bad);
      expect(r.status, bad.slice(0, 80)).toBe(400);
      expect(r.body.errors[0].field).toBe('X-Filter');
    }
    // Configs and nodes have no filterable fields.
    const cfg = await list({ port: 80 }, `/v4/nodebalancers/${ids.alpha}/configs`);
    expect(cfg.body).toEqual({ errors: [{ reason: 'Cannot filter on port', field: 'X-Filter' }] });
    expect((await list({}, `/v4/nodebalancers/${ids.alpha}/configs`)).status).toBe(200);
  });

  it('records an event for every create, update and delete, with the NodeBalancer as entity', async () => {
    const firstEventId = (await api.req('GET', '/v4/account/events?page_size=25')).body.data[0].id as number;
    const id = ids.charlie!;
    const base = `/v4/nodebalancers/${id}`;
    await api.req('PUT', base, { body: { tags: ['t-1'] } });
    const cfg = (await api.req('POST', `${base}/configs`, { body: { port: 8080 } })).body;
    await api.req('PUT', `${base}/configs/${cfg.id}`, { body: { algorithm: 'leastconn' } });
    const node = (await api.req('POST', `${base}/configs/${cfg.id}/nodes`, { body: { address: '10.1.1.1:80', label: 'node-c' } })).body;
    await api.req('PUT', `${base}/configs/${cfg.id}/nodes/${node.id}`, { body: { weight: 2 } });
    await api.req('DELETE', `${base}/configs/${cfg.id}/nodes/${node.id}`);
    await api.req('POST', `${base}/configs/${cfg.id}/rebuild`, { body: { nodes: [{ address: '10.1.1.2:80', label: 'node-d' }] } });
    await api.req('DELETE', `${base}/configs/${cfg.id}`);
    // A rejected change records nothing.
    await api.req('PUT', base, { body: { client_conn_throttle: 99 } });
    await api.req('DELETE', base);

    // linodego's WaitForEventFinished filter, as Terraform sends it.
    const created = (await api.req('GET', `/v4/account/events/${firstEventId}`)).body.created as string;
    const tf = await list({ '+order': 'desc', '+order_by': 'created', 'entity.id': id, 'entity.type': 'nodebalancer', created: { '+gte': created }, id: { '+gte': firstEventId + 1 } }, '/v4/account/events');
    expect(tf.status).toBe(200);
    const actions = tf.body.data.map((e: any) => e.action).reverse();
    expect(actions).toEqual([
      'nodebalancer_update', 'nodebalancer_config_create', 'nodebalancer_config_update', 'nodebalancer_node_create', 'nodebalancer_node_update',
      'nodebalancer_node_delete', 'nodebalancer_config_update', 'nodebalancer_config_delete', 'nodebalancer_delete',
    ]);
    for (const e of tf.body.data) {
      expect(e.entity).toEqual({ id, type: 'nodebalancer', label: 'charlie', url: `/v4/nodebalancers/${id}` });
      expect(e).toMatchObject({ status: 'notification', username: 'admin', percent_complete: null, seen: false, read: false });
    }
    const one = await list({ action: 'nodebalancer_delete', 'entity.id': id }, '/v4/account/events');
    expect(one.body.results).toBe(1);
    const creates = await list({ action: 'nodebalancer_create' }, '/v4/account/events');
    expect(creates.body.results).toBe(4);
    expect((await list({ label: 'x' }, '/v4/account/events')).body.errors[0]).toEqual({ reason: 'Cannot filter on label', field: 'X-Filter' });
    // Newest first by default; `seen` marks everything up to that id.
    const all = (await api.req('GET', '/v4/account/events')).body.data;
    expect(all.map((e: any) => e.id)).toEqual([...all.map((e: any) => e.id)].sort((a, b) => b - a));
    await api.req('POST', `/v4/account/events/${all[1].id}/seen`);
    const after = (await api.req('GET', '/v4/account/events')).body.data;
    expect(after[0].seen).toBe(false);
    expect(after.slice(1).every((e: any) => e.seen)).toBe(true);
  });

  it('deleting a NodeBalancer releases its address for the next create; ids are never reused', async () => {
    const a = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'addr-a' } })).body;
    const b = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'addr-b' } })).body;
    expect(a.ipv4).not.toBe(b.ipv4);
    // charlie was deleted above: the lowest free address is its old one.
    expect(a.ipv4).toBe(ipv4.charlie);
    await api.req('DELETE', `/v4/nodebalancers/${b.id}`);
    const c = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'addr-c' } })).body;
    expect(c.ipv4).toBe(b.ipv4);
    expect(c.hostname).toBe(b.hostname);
    expect(c.id).toBeGreaterThan(b.id);
    const cfgA = (await api.req('POST', `/v4/nodebalancers/${c.id}/configs`, { body: { port: 1 } })).body;
    await api.req('DELETE', `/v4/nodebalancers/${c.id}/configs/${cfgA.id}`);
    const cfgB = (await api.req('POST', `/v4/nodebalancers/${c.id}/configs`, { body: { port: 1 } })).body;
    expect(cfgB.id).toBeGreaterThan(cfgA.id);
    // The default label follows the never-reused id.
    const d = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east' } })).body;
    await api.req('DELETE', `/v4/nodebalancers/${d.id}`);
    const e = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east' } })).body;
    expect(e.label).toBe(`balancer${e.id}`);
    expect(e.id).toBe(d.id + 1);
  });

  it('keeps ids, addresses and data across a control-plane restart', async () => {
    const before = (await api.req('GET', '/v4/nodebalancers')).body;
    const { stateDir } = api;
    await api.cp.close();
    const { startControlPlane } = await import('../../../control-plane/main.js');
    const { silentLogger } = await import('../../../lib/logger.js');
    const cp2 = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, logger: silentLogger() });
    try {
      expect(cp2.adminToken).toBe(api.token);
      const res = await fetch(`${cp2.apiUrl}/v4/nodebalancers`, { headers: { authorization: `Bearer ${cp2.adminToken}` } });
      expect(await res.json()).toEqual(before);
      const made = await fetch(`${cp2.apiUrl}/v4/nodebalancers`, {
        method: 'POST', headers: { authorization: `Bearer ${cp2.adminToken}`, 'content-type': 'application/json' }, body: '{"region":"us-east"}',
      });
      const nb = (await made.json()) as { id: number };
      expect(nb.id).toBeGreaterThan(Math.max(...before.data.map((n: any) => n.id)));
    } finally {
      await cp2.close();
      api.cp.close = async () => undefined; // already closed; afterAll only removes the folder
    }
  });
});
