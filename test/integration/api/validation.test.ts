// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldErrors, startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { makeCa, makeCert, type Pem } from '../../helpers/certs.js';
import { defaultRegions } from '../../../control-plane/domain/regions.js';

/**
 * Defaults, shapes and every validation rule of issue 3 over raw HTTP, with field paths and
 * several errors in one 400. Rejected writes must leave the store exactly as it was.
 */
describe('NodeBalancer validation and defaults', () => {
  let api: ApiHarness;
  let pem: Pem;
  let other: Pem;
  let caPem: Pem;
  let nbId: number;

  beforeAll(async () => {
    api = await startApi({
      regions: [...defaultRegions, { id: 'db-only', label: 'No NBs here', country: 'us', capabilities: ['Managed Databases'], status: 'ok', resolvers: { ipv4: '127.0.0.53', ipv6: '::1' } }],
    });
    const ca = makeCa();
    caPem = ca;
    pem = makeCert(ca, 'a.example.com');
    other = makeCert(ca, 'b.example.com');
    nbId = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'valid-nb' } })).body.id;
  });
  afterAll(() => api.close());

  /** Sends a write that must fail with 400 and change nothing; returns the field errors. */
  async function rejected(method: string, path: string, body: unknown): Promise<Record<string, string>> {
    const before = api.snapshot();
    const r = await api.req(method, path, { body });
    expect(r.status, JSON.stringify(body).slice(0, 200)).toBe(400);
    expect(api.snapshot()).toBe(before);
    return fieldErrors(r.body);
  }

  it('applies the observed defaults: balancer<ID> label, throttle 0, null transfer, no ipv6', async () => {
    const r = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east' } });
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ label: `balancer${r.body.id}`, client_conn_throttle: 0, tags: [], ipv6: null, transfer: { in: null, out: null, total: null } });
    const tagsNull = await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', tags: null, label: null } });
    expect(tagsNull.body.tags).toEqual([]);
    expect(tagsNull.body.label).toBe(`balancer${tagsNull.body.id}`);
  });

  it('applies config defaults and node defaults', async () => {
    const c = await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: {} });
    expect(c.status).toBe(200);
    const { id, ...rest } = c.body;
    expect(id).toBeTypeOf('number');
    expect(rest).toEqual({
      port: 80, protocol: 'http', algorithm: 'roundrobin', stickiness: 'none', check: 'none', check_interval: 31, check_timeout: 30,
      check_attempts: 3, check_path: '', check_body: '', check_passive: true, proxy_protocol: 'none', cipher_suite: 'recommended',
      nodebalancer_id: nbId, ssl_commonname: '', ssl_fingerprint: '', ssl_cert: null, ssl_key: null, nodes_status: { up: 0, down: 0 },
      udp_check_port: 80, udp_session_timeout: 16,
    });
    const n = await api.req('POST', `/v4/nodebalancers/${nbId}/configs/${id}/nodes`, { body: { address: '127.0.0.1:8080', label: 'lo-node' } });
    expect(n.body).toMatchObject({ weight: 50, mode: 'accept', status: 'unknown', address: '127.0.0.1:8080' });
    await api.req('DELETE', `/v4/nodebalancers/${nbId}/configs/${id}`);
  });

  it('ignores nodes on config create and unknown or read-only fields everywhere', async () => {
    const c = await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, {
      body: { port: 81, id: 5, nodebalancer_id: 999, nodes_status: { up: 9 }, surprise: true, nodes: [{ address: 'bad', label: 'x' }] },
    });
    expect(c.status).toBe(200);
    expect(c.body.nodebalancer_id).toBe(nbId);
    expect((await api.req('GET', `/v4/nodebalancers/${nbId}/configs/${c.body.id}/nodes`)).body.results).toBe(0);
    const before = (await api.req('GET', `/v4/nodebalancers/${nbId}`)).body;
    const u = await api.req('PUT', `/v4/nodebalancers/${nbId}`, { body: { region: 'lab-local', ipv4: '1.2.3.4', id: 1, hostname: 'x', whatever: [] } });
    expect(u.status).toBe(200);
    expect(u.body).toMatchObject({ region: before.region, ipv4: before.ipv4, id: nbId, hostname: before.hostname });
    await api.req('DELETE', `/v4/nodebalancers/${nbId}/configs/${c.body.id}`);
  });

  it('validates NodeBalancer create fields, all at once', async () => {
    expect(await rejected('POST', '/v4/nodebalancers', {})).toEqual({ region: 'Region is required.' });
    const many = await rejected('POST', '/v4/nodebalancers', { region: 'mars-1', label: 'no spaces!', client_conn_throttle: 21, tags: 'web', firewall_id: 3 });
    expect(Object.keys(many).sort()).toEqual(['client_conn_throttle', 'firewall_id', 'label', 'region', 'tags']);
    expect(many.region).toBe('region is not valid');
    expect(many.label).toBe("Label can't contain special characters or spaces.");
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'db-only' })).toEqual({ region: 'region is not valid' });
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', label: 'ab' })).toEqual({ label: 'Label must be between 3 and 32 characters.' });
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', label: 'x'.repeat(33) })).toHaveProperty('label');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', label: 'valid-nb' })).toHaveProperty('label');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', client_conn_throttle: -1 })).toHaveProperty('client_conn_throttle');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', client_conn_throttle: '5' })).toHaveProperty('client_conn_throttle');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', client_conn_throttle: 2.5 })).toHaveProperty('client_conn_throttle');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 7 })).toHaveProperty('region');
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', tags: [1] })).toHaveProperty(['tags[0]']);
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', configs: {} })).toHaveProperty('configs');
  });

  it('validates nested configs and nodes with full paths, several at once', async () => {
    const errs = await rejected('POST', '/v4/nodebalancers', {
      region: 'us-east',
      configs: [
        { port: 80, nodes: [{ address: '10.0.0.1:80', label: 'ok-node' }, { address: '10.0.0.1', label: 'x' }] },
        { port: 80, protocol: 'ftp', nodes: [{ address: '10.0.0.300:80', label: 'fine', weight: 0, mode: 'sometimes' }] },
      ],
    });
    expect(errs).toEqual({
      'configs[0].nodes[1].address': 'Must be a valid IPv4 address followed by :port',
      'configs[0].nodes[1].label': 'Label should be between 3 and 32 characters.',
      'configs[1].port': 'Port must be unique.',
      'configs[1].protocol': 'protocol must be one of http, https, tcp, udp',
      'configs[1].nodes[0].address': 'Must be a valid IPv4 address followed by :port',
      'configs[1].nodes[0].weight': 'weight must be between 1 and 255',
      'configs[1].nodes[0].mode': 'mode must be one of accept, reject, drain, backup, none',
    });
    // Each config given at create needs at least one node (spec 4.1).
    expect(await rejected('POST', '/v4/nodebalancers', { region: 'us-east', configs: [{ port: 80, nodes: [] }, { port: 81 }] })).toEqual({
      'configs[0].nodes': 'You must provide at least one back end node.', 'configs[1].nodes': 'You must provide at least one back end node.',
    });
    const ok = await api.req('POST', '/v4/nodebalancers', {
      body: { region: 'us-east', configs: [{ port: 80, nodes: [{ address: '127.0.0.1:80', label: 'loopback' }] }, { port: 81, nodes: [{ address: '10.0.0.9:81', label: 'other' }] }] },
    });
    expect(ok.status).toBe(200);
  });

  it('validates config fields: ranges, enums, types and cross-field rules', async () => {
    const p = `/v4/nodebalancers/${nbId}/configs`;
    const fields = await rejected('POST', p, {
      port: 0, algorithm: 'random', stickiness: 'sometimes', check: 'ping', check_timeout: 31, check_attempts: 0, check_interval: 'often',
      check_path: 'has space', check_passive: 'yes', cipher_suite: 'strong', proxy_protocol: 'v3', check_body: 7,
    });
    expect(Object.keys(fields).sort()).toEqual(['algorithm', 'check', 'check_attempts', 'check_body', 'check_interval', 'check_passive',
      'check_path', 'check_timeout', 'cipher_suite', 'port', 'proxy_protocol', 'stickiness']);
    expect(await rejected('POST', p, { port: 65536 })).toHaveProperty('port');
    expect(await rejected('POST', p, { port: '80' })).toHaveProperty('port');
    expect(await rejected('POST', p, { check_attempts: 31 })).toHaveProperty('check_attempts');
    expect(await rejected('POST', p, { check_timeout: 0 })).toHaveProperty('check_timeout');
    expect(await rejected('POST', p, { check_interval: 10, check_timeout: 10 })).toEqual({ check_interval: 'check_interval must be greater than check_timeout' });
    expect(await rejected('POST', p, { check: 'http' })).toEqual({ check_path: 'An HTTP path is required.' });
    expect(await rejected('POST', p, { check: 'http_body', check_path: '/' })).toEqual({ check_body: 'An HTTP body regex is required.' });
    expect(await rejected('POST', p, { check: 'http_body' })).toEqual({ check_path: 'An HTTP path is required.', check_body: 'An HTTP body regex is required.' });
    expect(await rejected('POST', p, { protocol: 'http', proxy_protocol: 'v1' })).toEqual({ proxy_protocol: 'proxy_protocol v1 and v2 require protocol tcp' });
    expect(await rejected('POST', p, { protocol: 'tcp', stickiness: 'http_cookie' })).toEqual({ stickiness: 'http_cookie stickiness requires protocol http or https' });
    expect(await rejected('POST', p, { protocol: 'https' })).toEqual({
      ssl_cert: 'SSL certificate is required when using HTTPS.', ssl_key: 'SSL key is required when using HTTPS.',
    });
    expect(await rejected('POST', p, { protocol: 'https', ssl_cert: 'not a cert', ssl_key: pem.key })).toHaveProperty('ssl_cert');
    expect(await rejected('POST', p, { protocol: 'https', ssl_cert: pem.cert, ssl_key: 'not a key' })).toHaveProperty('ssl_key');
    expect(await rejected('POST', p, { protocol: 'https', ssl_cert: pem.cert, ssl_key: other.key })).toEqual({ ssl_key: 'SSL key does not match the certificate' });
    expect(await rejected('POST', p, { protocol: 'http', ssl_cert: pem.cert, ssl_key: pem.key })).toEqual({
      ssl_cert: 'ssl_cert is only allowed with protocol https', ssl_key: 'ssl_key is only allowed with protocol https',
    });
    expect(await rejected('POST', p, { protocol: 'tcp', ssl_cert: pem.cert })).toHaveProperty('ssl_cert');
    const https = await api.req('POST', p, { body: { port: 443, protocol: 'https', stickiness: 'http_cookie', ssl_cert: pem.cert, ssl_key: pem.key } });
    expect(https.body).toMatchObject({ ssl_cert: '<REDACTED>', ssl_key: '<REDACTED>', ssl_commonname: 'a.example.com' });
    expect(https.body.ssl_fingerprint).toMatch(/^([0-9A-F]{2}:){19}[0-9A-F]{2}$/);
    expect(await rejected('POST', p, { port: 443 })).toEqual({ port: 'Port must be unique.' });
    // A certificate followed by its CA chain: the leaf names the config.
    const chained = await api.req('POST', p, { body: { port: 8443, protocol: 'https', ssl_cert: `${pem.cert}${caPem.cert}`, ssl_key: pem.key } });
    expect(chained.body).toMatchObject({ ssl_commonname: 'a.example.com', ssl_fingerprint: https.body.ssl_fingerprint });
    await api.req('DELETE', `${p}/${chained.body.id}`);
    // Sending back what GET shows keeps the stored certificate; switching away from https drops it.
    const put = await api.req('PUT', `${p}/${https.body.id}`, { body: { ...https.body, check_attempts: 4 } });
    expect(put.status).toBe(200);
    expect(put.body.ssl_commonname).toBe('a.example.com');
    const tcp = await api.req('PUT', `${p}/${https.body.id}`, { body: { protocol: 'tcp', stickiness: 'none' } });
    expect(tcp.body).toMatchObject({ ssl_cert: null, ssl_key: null, ssl_commonname: '', ssl_fingerprint: '' });
    await api.req('DELETE', `${p}/${https.body.id}`);
  });

  it('validates node fields on create and update', async () => {
    const cfg = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 9000, protocol: 'tcp' } })).body;
    const p = `/v4/nodebalancers/${nbId}/configs/${cfg.id}/nodes`;
    expect(await rejected('POST', p, {})).toEqual({ address: 'address is required', label: 'label is required' });
    for (const address of ['10.0.0.1', '10.0.0.1:0', '10.0.0.1:65536', 'example.com:80', '[::1]:80', '10.0.0:80', 42, '10.0.0.1:80:1']) {
      expect(await rejected('POST', p, { address, label: 'node-x' }), String(address)).toHaveProperty('address');
    }
    expect(await rejected('POST', p, { address: '10.0.0.1:80', label: 'bad label' })).toHaveProperty('label');
    expect(await rejected('POST', p, { address: '10.0.0.1:80', label: 'n'.repeat(33) })).toHaveProperty('label');
    expect(await rejected('POST', p, { address: '10.0.0.1:80', label: 'node-x', weight: 256 })).toHaveProperty('weight');
    expect(await rejected('POST', p, { address: '10.0.0.1:80', label: 'node-x', weight: '5' })).toHaveProperty('weight');
    expect(await rejected('POST', p, { address: '10.0.0.1:80', label: 'node-x', mode: 'none' })).toHaveProperty('mode');
    const n = (await api.req('POST', p, { body: { address: '203.0.113.7:443', label: 'public.ok_node', weight: 255, mode: 'backup' } })).body;
    expect(n).toMatchObject({ address: '203.0.113.7:443', label: 'public.ok_node', weight: 255, mode: 'backup' });
    expect(await rejected('PUT', `${p}/${n.id}`, { weight: 0, address: 'x' })).toEqual({ address: 'Must be a valid IPv4 address followed by :port', weight: 'weight must be between 1 and 255' });
    const upd = await api.req('PUT', `${p}/${n.id}`, { body: { mode: 'drain' } });
    expect(upd.body).toMatchObject({ mode: 'drain', weight: 255, label: 'public.ok_node' });
  });

  it('a rebuild that fails validation changes nothing', async () => {
    const cfg = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 9100, protocol: 'tcp' } })).body;
    const other = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 9101, protocol: 'tcp' } })).body;
    const base = `/v4/nodebalancers/${nbId}/configs`;
    const a = (await api.req('POST', `${base}/${cfg.id}/nodes`, { body: { address: '127.0.0.1:1', label: 'node-a' } })).body;
    const foreign = (await api.req('POST', `${base}/${other.id}/nodes`, { body: { address: '127.0.0.1:2', label: 'node-f' } })).body;
    const r = `${base}/${cfg.id}/rebuild`;
    expect(await rejected('POST', r, { port: 9100 })).toEqual({ nodes: 'nodes is required and must be an array' });
    expect(await rejected('POST', r, { nodes: {} })).toHaveProperty('nodes');
    // One good change and one bad node: neither the config nor node-a may change.
    expect(await rejected('POST', r, { port: 9200, nodes: [{ id: a.id, address: '127.0.0.1:9', label: 'node-a2' }, { address: 'nope', label: 'node-b' }] }))
      .toEqual({ 'nodes[1].address': 'Must be a valid IPv4 address followed by :port' });
    expect(await rejected('POST', r, { nodes: [{ id: foreign.id, address: '127.0.0.1:3', label: 'node-x' }] })).toEqual({ 'nodes[0].id': 'Node not found in this config' });
    expect(await rejected('POST', r, { nodes: [{ id: 'one', address: '127.0.0.1:3', label: 'node-x' }] })).toHaveProperty(['nodes[0].id']);
    expect(await rejected('POST', r, { nodes: [{ id: a.id, address: '127.0.0.1:3', label: 'node-x' }, { id: a.id, address: '127.0.0.1:4', label: 'node-y' }] }))
      .toEqual({ 'nodes[1].id': 'Node listed twice' });
    expect(await rejected('POST', r, { port: 9101, nodes: [] })).toEqual({ port: 'Port must be unique.' });
    expect(await rejected('POST', r, { protocol: 'https', nodes: [] })).toHaveProperty('ssl_cert');
    // nodes: [] is a valid rebuild that removes every node.
    const empty = await api.req('POST', r, { body: { nodes: [] } });
    expect(empty.status).toBe(200);
    expect((await api.req('GET', `${base}/${cfg.id}/nodes`)).body.results).toBe(0);
    expect((await api.req('GET', `${base}/${other.id}/nodes`)).body.results).toBe(1);
  });

  it('accepts the request bodies linodego was recorded sending (linode-api.md §2)', async () => {
    const nb = await api.req('POST', '/v4/nodebalancers', { body: { label: 'go-test-def', region: 'us-east', client_conn_throttle: 20, tags: null } });
    expect(nb.body).toMatchObject({ label: 'go-test-def', client_conn_throttle: 20, tags: [], transfer: { in: null, out: null, total: null } });
    const base = `/v4/nodebalancers/${nb.body.id}/configs`;
    const cfg = await api.req('POST', base, { body: { port: 80, protocol: 'http', algorithm: 'roundrobin', check_interval: 60 } });
    expect(cfg.body).toMatchObject({ check_interval: 60, check_timeout: 30, check_attempts: 3 });
    const echoed = await api.req('POST', base, { body: { port: 81, check_interval: 30, check_attempts: 5, check_timeout: 5 } });
    expect(echoed.body).toMatchObject({ check_interval: 30, check_attempts: 5, check_timeout: 5 });
    const put = await api.req('PUT', `${base}/${cfg.body.id}`, { body: { port: 8080, protocol: 'tcp', proxy_protocol: 'v2', algorithm: 'leastconn' } });
    expect(put.body).toMatchObject({ port: 8080, protocol: 'tcp', proxy_protocol: 'v2', algorithm: 'leastconn', check_interval: 60, stickiness: 'none' });
    const node = await api.req('POST', `${base}/${cfg.body.id}/nodes`, { body: { address: '192.168.230.18:80', label: 'go-node-test-def', weight: 50, mode: 'accept' } });
    const nput = await api.req('PUT', `${base}/${cfg.body.id}/nodes/${node.body.id}`, { body: { label: 'go-node-test-def_r', weight: 100, mode: 'drain' } });
    expect(nput.body).toMatchObject({ label: 'go-node-test-def_r', weight: 100, mode: 'drain', address: '192.168.230.18:80' });
    const rebuilt = await api.req('POST', `${base}/${cfg.body.id}/rebuild`, {
      body: {
        port: 80, protocol: 'http', proxy_protocol: 'none', algorithm: 'roundrobin', stickiness: 'none', check: 'none', check_interval: 60,
        check_attempts: 3, check_passive: true, check_timeout: 30, cipher_suite: 'recommended',
        nodes: [{ address: '192.168.128.47:8080', label: 'go-node-test-def', weight: 10, mode: 'accept', id: node.body.id }],
      },
    });
    expect(rebuilt.status).toBe(200);
    expect(rebuilt.body).toMatchObject({ port: 80, protocol: 'http', proxy_protocol: 'none', nodes_status: { up: 0, down: 0 } });
    const nodes = (await api.req('GET', `${base}/${cfg.body.id}/nodes`)).body.data;
    expect(nodes.map((n: any) => [n.id, n.address, n.weight])).toEqual([[node.body.id, '192.168.128.47:8080', 10]]);
    expect((await api.req('GET', `/v4/nodebalancers/${nb.body.id}/stats`)).body).toEqual({ errors: [{ reason: 'Stats are unavailable at this time.' }] });
  });

  it('refuses bodies that are not JSON objects on every write', async () => {
    const cfg = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 9300 } })).body;
    for (const [m, p] of [['POST', '/v4/nodebalancers'], ['PUT', `/v4/nodebalancers/${nbId}`], ['POST', `/v4/nodebalancers/${nbId}/configs`],
      ['PUT', `/v4/nodebalancers/${nbId}/configs/${cfg.id}`], ['POST', `/v4/nodebalancers/${nbId}/configs/${cfg.id}/rebuild`],
      ['POST', `/v4/nodebalancers/${nbId}/configs/${cfg.id}/nodes`]] as const) {
      for (const raw of ['[]', '"text"', '42', 'null', '{', '{"a":1}}', 'true']) {
        const before = api.snapshot();
        const res = await api.req(m, p, { rawBody: raw });
        if (raw === 'null' && (m === 'PUT' || p.endsWith('/configs'))) {
          expect(res.status).toBe(200); // JSON null is taken as an empty body, like {}
          continue;
        }
        expect(res.status, `${m} ${p} ${raw}`).toBe(400);
        expect(api.snapshot()).toBe(before);
      }
    }
  });
});
