import { describe, expect, it } from 'vitest';
import { allOperations, assertResponseSchema, operationFor } from '../../helpers/api-schema.js';

/** The schema check used by the API suites must be able to fail. */
describe('OpenAPI schema fixture', () => {
  const nb = {
    id: 1, label: 'balancer1', region: 'us-east', hostname: '127-77-0-2.ip.linodeusercontent.com', ipv4: '127.77.0.2', ipv6: null,
    created: '2024-01-01T00:00:00', updated: '2024-01-01T00:00:00', client_conn_throttle: 0, tags: [],
    transfer: { in: null, out: null, total: null }, client_udp_sess_throttle: 0, type: 'common', lke_cluster: null,
  };

  it('covers every operation we serve and maps concrete paths to them', () => {
    expect(allOperations.length).toBe(37);
    expect(operationFor('GET', '/v4/nodebalancers/12/configs/3/nodes/4')).toBe('GET /nodebalancers/{nodeBalancerId}/configs/{configId}/nodes/{nodeId}');
    expect(operationFor('post', '/v4beta/nodebalancers/12/configs/3/rebuild?x=1')).toBe('POST /nodebalancers/{nodeBalancerId}/configs/{configId}/rebuild');
    expect(operationFor('GET', '/v4/nope')).toBeUndefined();
  });

  it('accepts a real-shaped NodeBalancer and rejects wrong types, extra and missing keys', () => {
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, nb)).not.toThrow();
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, { ...nb, id: '1' })).toThrow(/id/);
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, { ...nb, created: '2024-01-01T00:00:00Z' })).toThrow('data/created must match pattern');
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, { ...nb, client_conn_throttle: 21 })).toThrow('data/client_conn_throttle must be <= 20');
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, { ...nb, configs: [] })).toThrow('data must NOT have additional properties');
    const { transfer: _t, ...noTransfer } = nb;
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 200, noTransfer)).toThrow(/transfer/);
  });

  it('follows the spec where it wins: node status is unknown/UP/DOWN', () => {
    const node = { id: 1, address: '10.0.0.1:80', label: 'node1', status: 'unknown', weight: 50, mode: 'accept', config_id: 1, nodebalancer_id: 1, vpc_config_id: null };
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1/configs/1/nodes/1', 200, node)).not.toThrow();
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1/configs/1/nodes/1', 200, { ...node, status: 'Unknown' })).toThrow('data/status must be equal to one of the allowed values');
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1/configs/1/nodes/1', 200, { ...node, address: '10.0.0.1' })).toThrow('data/address must match pattern');
  });

  it('checks user views despite the official schema wrapping them in a stray items', () => {
    const user = { username: 'anna', email: 'a@b.c', restricted: true, ssh_keys: [], tfa_enabled: false, verified_phone_number: null,
      password_created: null, last_login: null, user_type: 'default' };
    expect(() => assertResponseSchema('GET', '/v4/account/users/anna', 200, user)).not.toThrow();
    const { email: _e, ...noEmail } = user;
    expect(() => assertResponseSchema('GET', '/v4/account/users/anna', 200, noEmail)).toThrow(/email/);
    expect(() => assertResponseSchema('GET', '/v4/account/users/anna', 200, { ...user, user_type: 'boss' })).toThrow('data/user_type must be equal to one of the allowed values');
  });

  it('checks envelopes, stats pairs and error bodies', () => {
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers', 200, { data: [nb], page: 1, pages: 1 })).toThrow(/results/);
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1/stats', 200, {
      title: 't', data: { connections: [[1, 2]], traffic: { in: [[1, 0.5]], out: [[1, 0]] } },
    })).not.toThrow();
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1/stats', 200, {
      title: 't', data: { connections: [1, 2], traffic: { in: [], out: [] } },
    })).toThrow('data/data/connections/0 must be array');
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 404, { errors: [{ reason: 'Not found' }] })).not.toThrow();
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 400, { errors: [] })).toThrow('data/errors must NOT have fewer than 1 items');
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 400, { errors: [{ field: 'x' }] })).toThrow("data/errors/0 must have required property 'reason'");
    expect(() => assertResponseSchema('GET', '/v4/nodebalancers/1', 400, { error: 'x' })).toThrow("data must have required property 'errors'");
  });
});

describe('OpenAPI schema fixture freshness', () => {
  it('is exactly what build-schemas.ts derives from the reference OpenAPI subset', async () => {
    const { existsSync, readFileSync } = await import('node:fs');
    const { buildSchemaFixture, defaultSource, fixturePath } = await import('../../fixtures/openapi/build-schemas.js');
    // The source schema lives beside the fixture, inside the repository.
    expect(existsSync(defaultSource), `reference not found at ${defaultSource}`).toBe(true);
    expect(buildSchemaFixture(readFileSync(defaultSource, 'utf8'))).toBe(readFileSync(fixturePath, 'utf8'));
  });
});
