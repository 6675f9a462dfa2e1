// integration-lane: concurrent (agent-fixture slot 21: its own 127.76/78/79.21 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 7, agent side, 1 node with the process runtime: provisioning time, TLS enforced and
 * verified against the cluster CA, allow_list by client source address, credentials reset,
 * agent restart without duplicates, delete leaving nothing behind.
 */
import { existsSync, readdirSync } from 'node:fs';
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('agent: 1-node database (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let stateDir: string;
  let db: DesiredDatabase;
  const net = testNet('127.78', 21);

  const connect = (source: string, password: string, ssl = true) =>
    connectFrom({ source, host: db.hostPrimary!, port: 3306, user: 'linroot', password, ca: ssl ? driver.db(1)!.caCertPem : undefined });

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-single', slot: 21 });
    ({ driver, stateDir } = fx);
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 1, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.2/32'] });
  });

  afterAll(async () => {
    await fx?.close();
  });

  it('reaches active in under 10 s and reports hosts, members, CA and version', async () => {
    const t0 = Date.now();
    driver.setDatabases([db]);
    const obs = await driver.waitFor(() => driver.db(1)?.status === 'active' && driver.db(1), 20_000, 'active');
    const seconds = (Date.now() - t0) / 1000;
    console.log(`1-node database active after ${seconds.toFixed(2)} s`);
    expect(seconds).toBeLessThan(10);
    expect(obs.hostPrimary).toBe(db.hostPrimary);
    expect(obs.port).toBe(3306);
    expect(Object.values(obs.members)).toEqual(['primary']);
    expect(obs.caCertPem).toMatch(/BEGIN CERTIFICATE/);
    expect(obs.engineVersion).toBe(db.version);
  });

  it('accepts TLS verified against the CA from an allowed source and refuses plain TCP', async () => {
    const c = await connect('127.0.0.2', 'Initial.Pass_01');
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))');
    await c.query("INSERT INTO app.t VALUES (1, 'one')");
    const [rows] = await c.query("SHOW STATUS LIKE 'Ssl_cipher'");
    expect((rows as any[])[0].Value).not.toBe('');
    const [vars] = await c.query('SELECT @@require_secure_transport AS r, @@have_ssl AS s');
    expect((vars as any[])[0]).toEqual({ r: 1, s: 'YES' });
    await c.end();
    const err = await connect('127.0.0.2', 'Initial.Pass_01', false).then((x) => x.end().then(() => null), (e: Error) => e);
    // MariaDB answers a plain connection under require_secure_transport with its own refusal
    // (not a wrong password's Access denied, which would say nothing about TLS).
    expect(String(err)).toMatch(/insecure transport/i);
  });

  it('enforces allow_list by source address and applies a change within 5 s', async () => {
    // Outside the allow_list the endpoint resets the connection before the server sees it; the
    // same address and password connect once the list names it (below).
    const refused = await connect('127.0.0.3', 'Initial.Pass_01').then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(refused)).toMatch(/ECONNRESET/);
    db = { ...db, allowList: ['127.0.0.3/32'], generation: 2 };
    const t0 = Date.now();
    driver.setDatabases([db]);
    const ok = await (async () => {
      for (;;) {
        const c = await connect('127.0.0.3', 'Initial.Pass_01').catch(() => null);
        if (c) {
          await c.end();
          return true;
        }
        if (Date.now() - t0 > 5000) return false;
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    expect(ok).toBe(true);
    const now2 = await connect('127.0.0.2', 'Initial.Pass_01').then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(now2)).toMatch(/ECONNRESET/);
    db = { ...db, allowList: [], generation: 3 };
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(1)?.convergedGeneration === 3, 5000, 'allow_list [] applied');
    for (const src of ['127.0.0.2', '127.0.0.3']) {
      const e = await connect(src, 'Initial.Pass_01').then((x) => x.end().then(() => null), (er: Error) => er);
      expect(String(e), src).toMatch(/ECONNRESET/);
    }
    db = { ...db, allowList: ['0.0.0.0/0'], generation: 4 };
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(1)?.convergedGeneration === 4, 5000, 'allow_list 0.0.0.0/0 applied');
  });

  it('credentials reset: the old password fails, the new one works', async () => {
    db = { ...db, rootPassword: 'Second.Pass_02', generation: 5 };
    driver.setDatabases([db]);
    driver.addOperation({ operationId: 'reset-1', databaseId: 1, resetCredentials: { newPassword: 'Second.Pass_02' } });
    const r = await driver.waitFor(() => driver.last()?.operationResults.find((x) => x.operationId === 'reset-1'), 10_000, 'reset result');
    expect(r.ok).toBe(true);
    driver.ackOperation('reset-1');
    const old = await connect('127.0.0.4', 'Initial.Pass_01').then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(old)).toMatch(/Access denied for user 'linroot'@'127\.0\.0\.4' \(using password: YES\)/);
    const c = await connect('127.0.0.4', 'Second.Pass_02');
    const [rows] = await c.query('SELECT v FROM app.t WHERE id = 1');
    expect((rows as any[])[0].v).toBe('one');
    await c.end();
  });

  it('a restarted agent finds the running node: same process, no duplicate, still serving', async () => {
    const before = await agent.runtime.list({});
    expect(before).toHaveLength(1);
    await agent.close();
    const seen = driver.reports.length;
    agent = await fx.startAgent();
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.hello) && driver.db(1)?.status === 'active', 10_000, 'active after restart');
    const after = await agent.runtime.list({});
    expect(after).toHaveLength(1);
    expect(after[0]!.ref).toBe(before[0]!.ref);
    const c = await connect('127.0.0.4', 'Second.Pass_02');
    await c.query("INSERT INTO app.t VALUES (2, 'two')");
    await c.end();
  });

  it('delete leaves nothing: no process, listener or data directory', async () => {
    const pids = (await agent.runtime.list({})).map((n) => n.ref);
    // The probe below sees the endpoint while it is there.
    expect(execFileSync('ss', ['-Hltn']).toString()).toContain(`${db.hostPrimary}:3306`);
    driver.setDatabases([]);
    await driver.waitFor(() => driver.last() && !driver.db(1), 15_000, 'database gone from reports');
    expect(await agent.runtime.list({})).toEqual([]);
    for (const pid of pids) expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(readdirSync(join(stateDir, 'databases'))).toEqual([]);
    const listening = execFileSync('ss', ['-Hltn']).toString();
    expect(listening).not.toContain(`${db.hostPrimary}:3306`);
    expect(listening).not.toContain(`${db.hostSecondary}:3306`);
  });

  it('a database deleted while it is still provisioning leaves nothing behind either', async () => {
    const d2 = desiredDb({ id: 2, engineId: db.engineId!, version: db.version!, clusterSize: 3, replicationType: 'asynch', hostPrimary: `${net}.3`, hostSecondary: `${net}.4` });
    const seen = driver.reports.length;
    driver.setDatabases([d2]);
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.databases.some((d) => d.id === 2 && d.status === 'provisioning')), 10_000, 'provisioning');
    driver.setDatabases([]);
    // The database stays reported until the interrupted provisioning has ended and its sweep is
    // done: a report without it tells the control plane that nothing of it is left. A node it was
    // starting when the delete came is removed once it has started (a few seconds under load).
    await driver.waitFor(() => driver.last() && !driver.db(2), 90_000, 'gone');
    expect(await agent.runtime.list({})).toEqual([]);
    expect(readdirSync(join(stateDir, 'databases'))).toEqual([]);
  }, 120_000);
});
