// integration-lane: concurrent (agent-fixture slot 26: its own 127.76/78/79.26 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 7 acceptance 4, agent side: SIGKILL the agent process. The database servers keep
 * running (they are detached), and a new agent process on the same state folder finds them:
 * same server processes, no duplicates, endpoints back, data intact.
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('agent: SIGKILL and restart of the agent process', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let stateDir: string;
  let child: ChildProcess | undefined;
  let db: DesiredDatabase;
  const net = testNet('127.78', 26);
  const runtime = () => createProcessRuntime({ root: join(stateDir, 'runtime'), logger: silentLogger() });

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-kill', slot: 26 });
    ({ driver, stateDir } = fx);
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 31, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'asynch', hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'] });
    child = await fx.spawnAgent();
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(31)?.status === 'active', 40_000, 'active');
  });

  afterAll(async () => {
    child?.kill('SIGKILL');
    await fx?.close();
  });

  const connect = () => connectFrom({ source: '127.0.0.9', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(31)!.caCertPem });

  it('servers survive the SIGKILL; the new agent adopts them without duplicates', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await c.query('INSERT INTO app.t VALUES (1)');
    await c.end();
    const before = (await runtime().list({})).map((n) => n.ref).sort();
    expect(before).toHaveLength(3);

    child!.kill('SIGKILL');
    await new Promise((r) => child!.once('exit', r));
    for (const pid of before) expect(existsSync(`/proc/${pid}`)).toBe(true);
    expect((await runtime().list({})).every((n) => n.state === 'running')).toBe(true);

    const seen = driver.reports.length;
    child = await fx.spawnAgent();
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.hello) && driver.db(31)?.status === 'active', 20_000, 'active again');
    const after = (await runtime().list({})).map((n) => n.ref).sort();
    expect(after).toEqual(before);
    const c2 = await connect();
    const [rows] = await c2.query('SELECT id FROM app.t');
    expect((rows as any[]).map((r) => r.id)).toEqual([1]);
    await c2.end();
  });
});
