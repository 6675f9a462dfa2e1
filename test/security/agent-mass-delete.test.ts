/**
 * docs/security/grpc.md, "The agent's last line": whoever sits between the control plane and an
 * agent (or forges the stream) sends an empty desired list, which used to delete every database
 * the agent runs, data and backups included. A real agent with a real MariaDB node refuses it
 * unless the message carries the control plane's `delete_all_intended` mark. The stand-in
 * control plane (control-plane-driver) plays the attacker: it sends the forged message raw.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../../agent/main.js';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from '../integration/agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('an agent refuses a desired state that would delete every database', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let db: DesiredDatabase;
  // Slot 37 of the agent tests' address range (control-plane-driver.ts testNet) is this file's.
  const net = testNet('127.78', 37);

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-massdel', slot: 37 });
    ({ driver } = fx);
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 1, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.2/32'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(1)?.status === 'active' && driver.db(1), 30_000, 'active');
    const c = await connectFrom({ source: '127.0.0.2', host: db.hostPrimary!, port: 3306, user: 'linroot', password: 'Initial.Pass_01', ca: driver.db(1)!.caCertPem });
    await c.query('CREATE DATABASE keepme');
    await c.end();
  });

  afterAll(async () => {
    await fx?.close();
  });

  it('keeps the database and its data when an empty list arrives without the intent mark', async () => {
    const nodes = await agent.runtime.list({});
    expect(nodes.length).toBe(1);
    driver.sendRaw({ databases: [], operations: [] });
    // Several reconcile rounds (500 ms each) later, nothing was removed.
    await new Promise((r) => setTimeout(r, 4_000));
    expect((await agent.runtime.list({})).map((n) => n.name)).toEqual(nodes.map((n) => n.name));
    expect(agent.agent.database(1)?.desired).toBeDefined();
    const c = await connectFrom({ source: '127.0.0.2', host: db.hostPrimary!, port: 3306, user: 'linroot', password: 'Initial.Pass_01', ca: driver.db(1)!.caCertPem });
    const [rows] = await c.query("SHOW DATABASES LIKE 'keepme'");
    expect((rows as unknown[]).length).toBe(1);
    await c.end();
    const refused = await agent.agent.metrics.desiredRefused.get();
    expect(refused.values[0]?.value).toBeGreaterThanOrEqual(1);
  });

  it('deletes them when the control plane marks the empty list as intended (the control case)', async () => {
    driver.sendRaw({ databases: [], operations: [], deleteAllIntended: true });
    await driver.waitFor(() => !driver.db(1), 30_000, 'database gone from reports');
    for (let i = 0; i < 100 && (await agent.runtime.list({})).length > 0; i++) await new Promise((r) => setTimeout(r, 100));
    expect(await agent.runtime.list({})).toEqual([]);
  });
});
