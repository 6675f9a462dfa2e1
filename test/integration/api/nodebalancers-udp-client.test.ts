// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
// The package's index .d.ts re-exports extension-less paths that NodeNext cannot follow; this
// file of it imports nothing, so its types are read directly.
import type {
  CreateNodeBalancerConfig, CreateNodeBalancerPayload, NodeBalancer, NodeBalancerConfig, NodeBalancerConfigNode,
} from '../../../node_modules/@linode/api-v4/lib/nodebalancers/types.js';
import type { PriceType } from '../../../node_modules/@linode/api-v4/lib/types.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { apiErrors, pointLinodeClientAt, sdk } from '../../helpers/api-linode-client.js';

/**
 * UDP configs, NodeBalancer types and the fields since 4.176 through the real @linode/api-v4
 * client, its current types on every payload and response; each refusal names its field.
 * Refusals, and values the SDK 0.158 client-side schema does not know yet (stickiness
 * source_ip), go over raw HTTP so that the server's answer is what is checked. The SDK takes a
 * node's address and port apart (`{address, port}`) and checks for a private address.
 */
const {
  createNodeBalancer, createNodeBalancerConfigNode, getNodeBalancer, getNodeBalancerConfig,
  getNodeBalancerConfigNodes, getNodeBalancerTypes, getRegions, getEvents, updateNodeBalancer, updateNodeBalancerConfig,
} = sdk;

describe('UDP NodeBalancers through @linode/api-v4', () => {
  let api: ApiHarness;
  let unpoint: () => void;
  let nbId: number;
  let udpId: number;

  beforeAll(async () => {
    api = await startApi();
    unpoint = pointLinodeClientAt(api.url, () => api.token);
  });
  afterAll(async () => {
    unpoint();
    await api.close();
  });

  const refused = async (method: string, path: string, body: unknown) => {
    const r = await api.req(method, path, { body });
    expect(r.status).toBe(400);
    return r.body.errors as { field?: string; reason: string }[];
  };

  it('lists the NodeBalancer types with prices', async () => {
    const types = await getNodeBalancerTypes();
    // Ids, labels and prices as today's recordings carry them (linodego TestNodeBalancerType_List).
    expect(types.data.map((t: any) => t.id)).toEqual(['nodebalancer', 'nodebalancer-pr100']);
    expect(types.data[0]).toEqual({
      id: 'nodebalancer', label: 'NodeBalancer', price: { hourly: 0.015, monthly: 10 },
      region_prices: [{ id: 'id-cgk', hourly: 0.018, monthly: 12 }, { id: 'br-gru', hourly: 0.021, monthly: 14 }], transfer: 0,
    });
    const premium: PriceType = types.data[1]!;
    expect(premium).toEqual({
      id: 'nodebalancer-pr100', label: 'Nodebalancer Premium', price: { hourly: 0.225, monthly: 150 },
      region_prices: [{ id: 'br-gru', hourly: 0.315, monthly: 210 }, { id: 'id-cgk', hourly: 0.27, monthly: 180 }], transfer: 0,
    });
    for (const t of types.data) {
      expect(Object.keys(t).sort()).toEqual(['id', 'label', 'price', 'region_prices', 'transfer']);
      expect(Object.keys(t.price).sort()).toEqual(['hourly', 'monthly']);
    }
    expect(types.results).toBe(2);
  });

  it('creates a NodeBalancer with a udp config: UDP defaults, the throttle and the new fields', async () => {
    const payload: CreateNodeBalancerPayload = {
      label: 'udp-nb', region: 'us-east', client_udp_sess_throttle: 7,
      configs: [{ port: 53, protocol: 'udp', algorithm: 'ring_hash', udp_check_port: 8053, check: 'connection', nodes: [
        { address: '192.168.20.10', port: 53, label: 'dns-1' }, { address: '192.168.20.11', port: 53, label: 'dns-2' },
      ] as unknown as CreateNodeBalancerConfig['nodes'] }],
    };
    const nb: NodeBalancer = await createNodeBalancer(payload);
    nbId = nb.id;
    expect(nb.client_udp_sess_throttle).toBe(7);
    expect(nb.type).toBe('common');
    expect(nb.lke_cluster).toBeNull();
    const configs = (await api.req('GET', `/v4/nodebalancers/${nbId}/configs`)).body.data as NodeBalancerConfig[];
    expect(configs).toHaveLength(1);
    const c = configs[0]!;
    udpId = c.id;
    expect(c).toMatchObject({
      port: 53, protocol: 'udp', algorithm: 'ring_hash', stickiness: 'session', cipher_suite: 'none', check_passive: false,
      proxy_protocol: 'none', udp_check_port: 8053, udp_session_timeout: 16,
    });
    const nodes: NodeBalancerConfigNode[] = (await getNodeBalancerConfigNodes(nbId, udpId)).data;
    expect(nodes.map((n) => [n.mode, n.vpc_config_id, n.status])).toEqual([['none', null, 'unknown'], ['none', null, 'unknown']]);
  });

  it('shows udp_check_port and udp_session_timeout on every protocol', async () => {
    // The SDK insists on nodes at config create, which the API ignores: sent raw.
    const tcp: CreateNodeBalancerConfig = { port: 80, protocol: 'tcp' };
    const c = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: tcp })).body as NodeBalancerConfig;
    expect(c).toMatchObject({ protocol: 'tcp', stickiness: 'none', cipher_suite: 'recommended', udp_check_port: 80, udp_session_timeout: 16 });
  });

  it('updates a udp config and the UDP throttle, and reads them back', async () => {
    const up: NodeBalancerConfig = await updateNodeBalancerConfig(nbId, udpId, { algorithm: 'leastconn', udp_check_port: 9053, nodes: [] });
    expect(up).toMatchObject({ algorithm: 'leastconn', stickiness: 'session', udp_check_port: 9053, cipher_suite: 'none' });
    const body: CreateNodeBalancerConfig = { stickiness: 'source_ip' };
    expect((await api.req('PUT', `/v4/nodebalancers/${nbId}/configs/${udpId}`, { body })).body).toMatchObject({ stickiness: 'source_ip' });
    expect(await getNodeBalancerConfig(nbId, udpId)).toMatchObject({ algorithm: 'leastconn', stickiness: 'source_ip', udp_check_port: 9053 });
    const nb: NodeBalancer = await updateNodeBalancer(nbId, { client_udp_sess_throttle: 20 });
    expect(nb.client_udp_sess_throttle).toBe(20);
    expect((await getNodeBalancer(nbId)).client_udp_sess_throttle).toBe(20);
    // A node added to a udp config without a mode gets none.
    const node: NodeBalancerConfigNode = await createNodeBalancerConfigNode(nbId, udpId, { address: '192.168.20.12', port: 53, label: 'dns-3' });
    expect(node.mode).toBe('none');
  });

  it('switches a tcp config to udp and back without other fields', async () => {
    const body: CreateNodeBalancerConfig = { port: 81, protocol: 'tcp', algorithm: 'source', stickiness: 'table', proxy_protocol: 'v2' };
    const c = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body })).body as NodeBalancerConfig;
    const udp = (await api.req('PUT', `/v4/nodebalancers/${nbId}/configs/${c.id}`, { body: { protocol: 'udp' } })).body as NodeBalancerConfig;
    expect(udp).toMatchObject({ protocol: 'udp', algorithm: 'roundrobin', stickiness: 'session', proxy_protocol: 'none', cipher_suite: 'none', check_passive: false });
    const tcp = (await api.req('PUT', `/v4/nodebalancers/${nbId}/configs/${c.id}`, { body: { protocol: 'tcp' } })).body as NodeBalancerConfig;
    expect(tcp).toMatchObject({ protocol: 'tcp', algorithm: 'roundrobin', stickiness: 'none', cipher_suite: 'recommended' });
  });

  it('refuses what a udp config cannot have, naming each field', async () => {
    const path = `/v4/nodebalancers/${nbId}/configs`;
    expect(await refused('POST', path, { port: 60, protocol: 'udp', proxy_protocol: 'v1' }))
      .toEqual([{ field: 'proxy_protocol', reason: 'proxy_protocol must be none with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'udp', check_passive: true }))
      .toEqual([{ field: 'check_passive', reason: 'check_passive is not supported with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'udp', cipher_suite: 'recommended' }))
      .toEqual([{ field: 'cipher_suite', reason: 'cipher_suite must be none with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'udp', algorithm: 'source' }))
      .toEqual([{ field: 'algorithm', reason: 'algorithm source is not allowed with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'udp', stickiness: 'table' }))
      .toEqual([{ field: 'stickiness', reason: 'stickiness table is not allowed with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'tcp', algorithm: 'ring_hash' }))
      .toEqual([{ field: 'algorithm', reason: 'algorithm ring_hash is only allowed with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'http', stickiness: 'session' }))
      .toEqual([{ field: 'stickiness', reason: 'stickiness session is only allowed with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'tcp', cipher_suite: 'none' }))
      .toEqual([{ field: 'cipher_suite', reason: 'cipher_suite none is only allowed with protocol udp' }]);
    expect(await refused('POST', path, { port: 60, protocol: 'udp', udp_check_port: 70000 }))
      .toEqual([{ field: 'udp_check_port', reason: 'udp_check_port must be between 1 and 65535' }]);
    expect(await refused('PUT', `${path}/${udpId}`, { udp_session_timeout: 60 }))
      .toEqual([{ field: 'udp_session_timeout', reason: 'udp_session_timeout is read-only' }]);
    // Sending back what was read is fine.
    expect((await api.req('PUT', `${path}/${udpId}`, { body: { udp_session_timeout: 16 } })).status).toBe(200);
    const tcp = (await api.req('GET', path)).body.data.find((c: NodeBalancerConfig) => c.port === 80) as NodeBalancerConfig;
    expect(await refused('POST', `${path}/${tcp.id}/nodes`, { address: '192.0.2.20:80', label: 'web-1', mode: 'none' }))
      .toEqual([{ field: 'mode', reason: 'mode none is only allowed for nodes of a udp config' }]);
  });

  it('refuses firewall_id, vpcs, unknown types and throttles out of range, naming each field', async () => {
    const errs = await refused('POST', '/v4/nodebalancers', {
      region: 'us-east', firewall_id: 12, vpcs: [{ subnet_id: 3 }], type: 'premium_40gb', client_udp_sess_throttle: 21,
    });
    expect(errs).toEqual(expect.arrayContaining([
      { field: 'firewall_id', reason: 'Firewalls are not supported by this server' },
      { field: 'vpcs', reason: 'VPCs are not supported by this server' },
      { field: 'type', reason: 'type must be one of common, premium' },
      { field: 'client_udp_sess_throttle', reason: 'client_udp_sess_throttle must be between 0 and 20' },
    ]));
    expect(errs).toHaveLength(4);
    expect(await refused('PUT', `/v4/nodebalancers/${nbId}`, { client_udp_sess_throttle: -1 }))
      .toEqual([{ field: 'client_udp_sess_throttle', reason: 'client_udp_sess_throttle must be between 0 and 20' }]);
    // The SDK's own call reaches the same refusal.
    const viaSdk = await apiErrors(createNodeBalancer({ label: 'fw-nb', region: 'us-east', configs: [], firewall_id: 12 } satisfies CreateNodeBalancerPayload));
    expect(viaSdk.errors).toContainEqual({ field: 'firewall_id', reason: 'Firewalls are not supported by this server' });
  });

  /** `n` distinct node addresses in 192.0.2.0/24 (TEST-NET-1), ports from 1000. */
  const manyNodes = (n: number) => Array.from({ length: n }, (_, i) => ({ address: `192.0.2.${(i % 250) + 1}:${1000 + i}`, label: `node${i}` }));

  it('holds a common NodeBalancer\'s configs to 1,000 nodes, on node create and on rebuild, naming nodes', async () => {
    const c = (await api.req('POST', `/v4/nodebalancers/${nbId}/configs`, { body: { port: 99, protocol: 'udp' } })).body as NodeBalancerConfig;
    const nodes = manyNodes(1000);
    expect((await api.req('POST', `/v4/nodebalancers/${nbId}/configs/${c.id}/rebuild`, { body: { nodes } })).status).toBe(200);
    const reason = 'A common NodeBalancer may have at most 1000 nodes per config';
    expect(await refused('POST', `/v4/nodebalancers/${nbId}/configs/${c.id}/nodes`, { address: '192.0.2.1:9', label: 'one-more' }))
      .toEqual([{ field: 'nodes', reason }]);
    // The SDK's own call reaches the same refusal.
    const viaSdk = await apiErrors(createNodeBalancerConfigNode(nbId, c.id, { address: '192.168.20.99', port: 9, label: 'sdk-more' }));
    expect(viaSdk.errors).toEqual([{ field: 'nodes', reason }]);
    expect(await refused('POST', `/v4/nodebalancers/${nbId}/configs/${c.id}/rebuild`, { nodes: [...nodes, { address: '192.0.2.1:9', label: 'one-more' }] }))
      .toEqual([{ field: 'nodes', reason }]);
  });

  it('creates a premium NodeBalancer and holds its configs to premium\'s own limit, 2,000 nodes', async () => {
    const nb = (await api.req('POST', '/v4/nodebalancers', { body: { region: 'us-east', label: 'premium-nb', type: 'premium' } })).body as NodeBalancer;
    expect(nb.type).toBe('premium');
    expect((await getNodeBalancer(nb.id)).type).toBe('premium');
    const c = (await api.req('POST', `/v4/nodebalancers/${nb.id}/configs`, { body: { port: 53, protocol: 'udp' } })).body as NodeBalancerConfig;
    // Past common's 1,000: a premium config takes 1,999 by rebuild, then its 2,000th node by create.
    const nodes = manyNodes(1999);
    expect((await api.req('POST', `/v4/nodebalancers/${nb.id}/configs/${c.id}/rebuild`, { body: { nodes } })).status).toBe(200);
    const last = await api.req('POST', `/v4/nodebalancers/${nb.id}/configs/${c.id}/nodes`, { body: { address: '192.0.2.1:9', label: 'node-2000' } });
    expect(last.status).toBe(200);
    expect((await getNodeBalancerConfigNodes(nb.id, c.id, { page_size: 25 })).results).toBe(2000);
    const reason = 'A premium NodeBalancer may have at most 2000 nodes per config';
    expect(await refused('POST', `/v4/nodebalancers/${nb.id}/configs/${c.id}/nodes`, { address: '192.0.2.1:10', label: 'one-more' }))
      .toEqual([{ field: 'nodes', reason }]);
    expect(await refused('POST', `/v4/nodebalancers/${nb.id}/configs/${c.id}/rebuild`, { nodes: manyNodes(2001) }))
      .toEqual([{ field: 'nodes', reason }]);
  });

  it('carries site_type and placement_group_limits on regions, and a string message on events', async () => {
    const regions = await getRegions();
    for (const r of regions.data) {
      expect(r.site_type).toBe('core');
      expect(r.placement_group_limits).toEqual({ maximum_linodes_per_flexible_pg: 5, maximum_linodes_per_pg: 5, maximum_pgs_per_customer: null });
      expect(r.monitors).toEqual({ alerts: [], metrics: [] });
    }
    const events = await getEvents({}, { action: 'nodebalancer_create' });
    expect(events.results).toBeGreaterThan(0);
    for (const e of events.data) expect(typeof e.message).toBe('string');
  });
});
