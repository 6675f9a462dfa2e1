// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { apiErrors, pointLinodeClientAt, sdk } from '../../helpers/api-linode-client.js';
import { firstEngine, until } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';
import { hostCredentials } from '../../helpers/fleet.js';

/**
 * The real @linode/api-v4 client (which sends every database call to /v4beta) against the
 * database API, over a scripted agent: the calls Cloud Manager makes work unchanged.
 */
describe('databases API with @linode/api-v4', () => {
  let api: ApiHarness;
  let agent: ScriptedAgent;
  let engine: string;
  let unpoint: () => void;
  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
    agent = startScriptedAgent(api.cp.grpcAddress, { id: 'sdk-agent', credentials: await hostCredentials(api.cp, 'agent', 'sdk-agent', '*') });
    unpoint = pointLinodeClientAt(api.url, () => api.token);
  });
  afterAll(async () => {
    unpoint?.();
    agent?.close();
    await api?.close();
  });

  it('runs the SDK database calls end to end', async () => {
    const engines = await sdk.getDatabaseEngines!();
    expect(engines.data.map((e: any) => e.id)).toContain(engine);
    expect((await sdk.getDatabaseEngine!(engine)).id).toBe(engine);
    expect((await sdk.getDatabaseTypes!()).results).toBe(19);
    expect((await sdk.getDatabaseType!('g6-standard-2')).memory).toBe(4096);

    const created = await sdk.createDatabase!('mysql', {
      label: 'sdk-db', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, replication_type: 'semi_synch', allow_list: ['203.0.113.1'],
    });
    expect(created).toMatchObject({ label: 'sdk-db', status: 'provisioning', cluster_size: 3, replication_type: 'semi_synch' });
    const id = created.id as number;
    await until('active', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);
    const listed = await sdk.getDatabases!();
    expect(listed.data[0]).toMatchObject({ id, instance_uri: `/v4/databases/mysql/instances/${id}` });
    expect((await sdk.getEngineDatabases!('mysql')).results).toBe(1);

    const updated = await sdk.updateDatabase!('mysql', id, { label: 'sdk-db-2', allow_list: ['203.0.113.0/24'] });
    expect(updated).toMatchObject({ label: 'sdk-db-2', status: 'updating' });
    await until('active again', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);

    const creds = await sdk.getDatabaseCredentials!('mysql', id);
    expect(creds.username).toBe('linroot');
    await sdk.resetDatabaseCredentials!('mysql', id);
    await until('password changed', async () => (await sdk.getDatabaseCredentials!('mysql', id)).password !== creds.password || undefined);
    const ssl = await sdk.getSSLFields!('mysql', id);
    expect(Buffer.from(ssl.ca_certificate, 'base64').toString()).toMatch(/BEGIN CERTIFICATE/);

    await api.req('POST', `/v4beta/databases/mysql/instances/${id}/backups`, { body: { label: 'sdk_snap', target: 'primary' } });
    const backups = await until('snapshot listed', async () => {
      const b = await sdk.getDatabaseBackups!('mysql', id);
      return b.results === 1 ? b : undefined;
    });
    expect((await sdk.getDatabaseBackup!('mysql', id, backups.data[0].id)).label).toBe('sdk_snap');
    await until('active after snapshot', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);
    await sdk.legacyRestoreWithBackup!('mysql', id, backups.data[0].id);
    await until('active after restore', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);
    await sdk.patchDatabase!('mysql', id);
    await until('active after patch', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);
    await sdk.suspendDatabase!('mysql', id);
    await until('suspended', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'suspended' || undefined);
    await sdk.resumeDatabase!('mysql', id);
    await until('resumed', async () => (await sdk.getEngineDatabase!('mysql', id)).status === 'active' || undefined);

    const bad = await apiErrors(sdk.updateDatabase!('mysql', id, { type: 'g6-nope-1' }));
    expect(bad.status).toBe(400);
    expect(bad.errors[0]!.field).toBe('type');
    await sdk.deleteDatabase!('mysql', id);
    const gone = await apiErrors(sdk.getEngineDatabase!('mysql', id));
    expect(gone.status).toBe(404);
  });
});
