import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { migrations } from '../../../control-plane/store/common/migrations.js';
import { silentLogger } from '../../../lib/logger.js';
import { api, runFulcrum } from '../../helpers/lab.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

function fulcrum(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const p = runFulcrum(args);
  let out = '';
  let err = '';
  p.stdout!.on('data', (d) => (out += d));
  p.stderr!.on('data', (d) => (err += d));
  return new Promise((resolve) => p.on('exit', (code) => resolve({ code: code ?? -1, out: out.trim(), err })));
}

/**
 * `fulcrum store migrate` on both stores, and a control plane running on PostgreSQL through
 * `store: postgres://...` (docs/install.md, "PostgreSQL"): the API writes there, and
 * `fulcrum token create --store` issues a token the running API accepts.
 */
describe('the PostgreSQL store from the command line and the control plane', () => {
  let cluster: PgCluster;
  let url: string;
  const dirs: string[] = [];
  const dir = () => {
    const d = mkdtempSync(join(tmpdir(), 'hapg-cli-'));
    dirs.push(d);
    return d;
  };
  let cp: ControlPlane | undefined;
  const last = migrations.map((m) => m.id).sort().at(-1);

  beforeAll(async () => {
    cluster = await startPgCluster();
    url = await cluster.newDatabase();
  }, 180_000);
  afterAll(async () => {
    await cp?.close();
    await cluster?.stop();
    for (const d of dirs) rmSync(d, { recursive: true, force: true });
  }, 60_000);

  it('store migrate brings a SQLite file and a PostgreSQL database to the same last migration', async () => {
    const lite = await fulcrum(['store', 'migrate', '--state', dir()]);
    expect(lite.code, lite.err).toBe(0);
    expect(lite.out).toBe(`sqlite store at migration ${last} (${migrations.length} applied)`);
    const pg = await fulcrum(['store', 'migrate', '--state', dir(), '--store', url]);
    expect(pg.code, pg.err).toBe(0);
    expect(pg.out).toBe(`postgres store at migration ${last} (${migrations.length} applied)`);
    const bad = await fulcrum(['store', 'migrate', '--state', dir(), '--store', 'mysql://x']);
    expect(bad.code).toBe(2);
    expect(bad.err).toContain('--store must be sqlite or a postgres:// URL');
  });

  it('a control plane on PostgreSQL serves the API, and token create writes to the same store', async () => {
    const stateDir = dir();
    cp = await startControlPlane({ stateDir, store: url, logger: silentLogger() });
    expect(cp.context.store.kind).toBe('postgres');
    const admin = api(cp.apiUrl, cp.adminToken);
    const made = await admin('POST', '/v4/nodebalancers', { region: 'us-east', label: 'on-postgres', configs: [{ port: 80, nodes: [{ address: '10.0.0.1:80', label: 'node' }] }] });
    expect(made.status).toBe(200);
    // Refused by the label's uniqueness in PostgreSQL (its unique violation read as the API's refusal).
    const again = await admin('POST', '/v4/nodebalancers', { region: 'us-east', label: 'on-postgres' });
    expect({ status: again.status, body: again.body }).toEqual({ status: 400, body: { errors: [{ field: 'label', reason: 'Label must be unique among your NodeBalancers' }] } });
    const t = await fulcrum(['token', 'create', '--state', stateDir, '--store', url, '--scopes', 'nodebalancers:read_only']);
    expect(t.code, t.err).toBe(0);
    const list = await api(cp.apiUrl, t.out)('GET', '/v4/nodebalancers');
    expect(list.body.data.map((nb: { label: string }) => nb.label)).toEqual(['on-postgres']);
  });
});
