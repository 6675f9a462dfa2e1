import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { api, runFulcrum } from '../../helpers/lab.js';

function tokenCreate(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = runFulcrum(['token', 'create', ...args]);
  let out = '';
  let err = '';
  p.stdout!.on('data', (d) => (out += d));
  p.stderr!.on('data', (d) => (err += d));
  return new Promise((resolve) => p.on('exit', (code) => resolve({ code: code ?? -1, out: out.trim(), err })));
}

// `fulcrum token create` writes straight into the control plane's store (it may be running).
describe('fulcrum token create', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-token-'));
  let cp: ControlPlane;
  beforeAll(async () => {
    cp = await startControlPlane({ stateDir, logger: silentLogger() });
  });
  afterAll(() => cp.close());

  it('issues a scoped token the running API accepts', async () => {
    const r = await tokenCreate(['--state', stateDir, '--scopes', 'nodebalancers:read_only', '--label', 'ro']);
    expect(r.code).toBe(0);
    expect(r.out).toMatch(/^[0-9a-f]{64}$/);
    const call = api(cp.apiUrl, r.out);
    expect((await call('GET', '/v4/nodebalancers')).status).toBe(200);
    const denied = await call('POST', '/v4/nodebalancers', { region: 'us-east' });
    expect(denied.status).toBe(401);
    expect(denied.body.errors[0].reason).toBe('Your OAuth token is not authorized to use this endpoint.');
  });

  it('refuses a malformed scope', async () => {
    const r = await tokenCreate(['--state', stateDir, '--scopes', 'nodebalancers:everything']);
    expect(r.code).toBe(2);
    expect(r.err).toMatch(/Invalid scope/);
  });

  it('creates restricted users with grants', async () => {
    const r = await tokenCreate(['--state', stateDir, '--user', 'limited', '--restricted']);
    expect(r.code).toBe(0);
    const res = await api(cp.apiUrl, r.out)('POST', '/v4/nodebalancers', { region: 'us-east' });
    // The grants' refusal (a restricted user without add_nodebalancers), not a bad token's 401.
    expect({ status: res.status, body: res.body }).toEqual({ status: 403, body: { errors: [{ reason: 'Unauthorized' }] } });
  });
});
