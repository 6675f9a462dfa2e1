import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { until } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';
import { hostCredentials } from '../../helpers/fleet.js';

/**
 * A control-plane restart keeps databases, passwords and endpoints, marks agents disconnected
 * until they say hello again, and never sends a desired version lower than one already sent.
 */
describe('databases across a control-plane restart', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-db-restart-'));
  let cp: ControlPlane | undefined;
  let agent: ScriptedAgent | undefined;
  afterAll(async () => {
    agent?.close();
    await cp?.close();
    rmSync(stateDir, { recursive: true, force: true });
  });
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(cp!.apiUrl + path, {
      method, headers: { authorization: `Bearer ${cp!.adminToken}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    return { status: res.status, body: JSON.parse(await res.text()) };
  };

  it('keeps state and versions', async () => {
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, logger: silentLogger() });
    const engine = (await call('GET', '/v4/databases/engines')).body.data[0].id;
    agent = startScriptedAgent(cp.grpcAddress, { id: 'restart-agent', credentials: await hostCredentials(cp, 'agent', 'restart-agent', '*') });
    const d = (await call('POST', '/v4/databases/mysql/instances', { label: 'restart-db', region: 'us-east', type: 'g6-nanode-1', engine })).body;
    await until('active', async () => (await call('GET', `/v4/databases/mysql/instances/${d.id}`)).body.status === 'active' || undefined);
    const before = (await call('GET', `/v4/databases/mysql/instances/${d.id}`)).body;
    const password = (await call('GET', `/v4/databases/mysql/instances/${d.id}/credentials`)).body.password;
    const version = agent.desired()!.version;
    agent.close();
    await cp.close();

    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, logger: silentLogger() });
    expect((await call('GET', '/v4/fulcrum/agents')).body.data).toMatchObject([{ id: 'restart-agent', connected: false }]);
    const after = (await call('GET', `/v4/databases/mysql/instances/${d.id}`)).body;
    expect(after).toEqual(before);
    expect((await call('GET', `/v4/databases/mysql/instances/${d.id}/credentials`)).body.password).toBe(password);
    agent = startScriptedAgent(cp.grpcAddress, { id: 'restart-agent', credentials: await hostCredentials(cp, 'agent', 'restart-agent', '*') });
    const desired = await until('desired after restart', () => agent!.desired());
    expect(desired.version).toBeGreaterThanOrEqual(version);
    expect(desired.databases.map((x) => Number(x.id))).toEqual([d.id]);
    expect((await call('PUT', `/v4/databases/mysql/instances/${d.id}`, { label: 'restart-db-2' })).status).toBe(200);
    const next = await until('new version', () => (agent!.desired()!.version > desired.version ? agent!.desired() : undefined));
    expect(next.databases[0]!.label).toBe('restart-db-2');
  });

  it('never hands a deleted database\'s id out again, also after a restart', async () => {
    const engine = (await call('GET', '/v4/databases/engines')).body.data[0].id;
    const make = async (label: string) => {
      const r = await call('POST', '/v4/databases/mysql/instances', { label, region: 'us-east', type: 'g6-nanode-1', engine });
      expect(r.status).toBe(200);
      await until(`${label} active`, async () => (await call('GET', `/v4/databases/mysql/instances/${r.body.id}`)).body.status === 'active' || undefined);
      return r.body.id as number;
    };
    const drop = async (id: number) => {
      expect((await call('DELETE', `/v4/databases/mysql/instances/${id}`)).status).toBe(200);
      // Gone for good once its delete event finishes (the row is purged when no agent runs it).
      await until(`${id} purged`, async () => {
        const events = (await call('GET', '/v4/account/events')).body.data as any[];
        return events.some((e) => e.action === 'database_delete' && e.entity?.id === id && e.status === 'finished') || undefined;
      });
    };
    const a = await make('ids-a');
    await drop(a);
    const b = await make('ids-b');
    expect(b).toBe(a + 1);
    await drop(b);
    agent!.close();
    await cp!.close();
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, logger: silentLogger() });
    agent = startScriptedAgent(cp.grpcAddress, { id: 'restart-agent', credentials: await hostCredentials(cp, 'agent', 'restart-agent', '*') });
    const c = await make('ids-c');
    expect(c).toBe(b + 1);
  });
});
