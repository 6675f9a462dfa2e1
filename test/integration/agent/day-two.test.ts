// integration-lane: concurrent (agent-fixture slot 25: its own 127.76/78/79.25 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 8, agent side, with real servers: restore on a 3-node cluster (replicas agree), a
 * patch that waits for the maintenance window of an injected clock and then rolls the cluster
 * under a writer (no committed row lost, no error streak over 5 s), a 1-node patch now (the
 * writer sees the downtime, then resumes), and suspend/resume keeping the data.
 */
import { symlinkSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue, type CatalogueEntry } from '../../../agent/catalogue.js';
import { q, withAdmin } from '../../../agent/mysql/admin.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, craftBackup, desiredDb, halfBrokenDump, runOperation, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

/** Inserts 20 rows per second through an endpoint, reconnecting on errors. */
function startWriter(connect: () => Promise<import('mysql2/promise').Connection>, table: string, firstId: number) {
  const acked: number[] = [];
  let stop = false;
  let id = firstId;
  let lastOk = Date.now();
  let longestGapMs = 0;
  let errors = 0;
  const done = (async () => {
    let conn: import('mysql2/promise').Connection | undefined;
    while (!stop) {
      const tickStart = Date.now();
      try {
        conn ??= await connect();
        const v = id++;
        await conn.query(`INSERT INTO ${table} VALUES (?)`, [v]);
        acked.push(v);
        longestGapMs = Math.max(longestGapMs, Date.now() - lastOk);
        lastOk = Date.now();
      } catch {
        errors++;
        conn?.destroy();
        conn = undefined;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, 50 - (Date.now() - tickStart))));
    }
    conn?.destroy();
  })();
  return {
    acked,
    get errors() {
      return errors;
    },
    async stop() {
      stop = true;
      await done;
      return { longestGapMs: Math.max(longestGapMs, Date.now() - lastOk) };
    },
  };
}

describe('agent: day two on real clusters', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let stateDir: string;
  let engine: CatalogueEntry;
  let three: DesiredDatabase;
  let one: DesiredDatabase;
  let patched: string;
  // Monday 2 March 2026, 10:00 UTC; the window is Sunday 20:00-21:00.
  const clock = new ManualClock(Date.UTC(2026, 2, 2, 10, 0, 0));
  const net = testNet('127.78', 25);

  beforeAll(async () => {
    // The agent's operator lists the newer build in its catalogue: an agent runs nothing else.
    fx = await createAgentFixture({
      id: 'agent-daytwo', slot: 25, clock, reconcileIntervalMs: 300,
      extra: () => ({ catalogue: [engine, { ...engine, binary: patched }] }),
    });
    ({ driver, stateDir } = fx);
    patched = join(stateDir, 'mariadbd-patched');
    [engine] = (await detectLocalCatalogue()) as [CatalogueEntry];
    // A "newer build of the same version": another path to the server binary.
    symlinkSync(engine.binary!, patched);
    agent = await fx.startAgent();
    const updates = { frequency: 'weekly', duration: 1, hourOfDay: 20, dayOfWeek: 7, weekOfMonth: 0 };
    three = desiredDb({
      id: 21, engineId: engine.id, version: engine.version, clusterSize: 3, replicationType: 'semi_synch', updates,
      hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'],
    });
    one = desiredDb({ id: 22, engineId: engine.id, version: engine.version, updates, hostPrimary: `${net}.3`, hostSecondary: `${net}.4`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([three, one]);
    await driver.waitFor(() => driver.db(21)?.status === 'active' && driver.db(22)?.status === 'active', 40_000, 'both active');
    for (const d of [three, one]) {
      const c = await connectTo(d);
      await c.query('CREATE DATABASE app');
      await c.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
      await c.end();
    }
  });

  afterAll(async () => {
    await fx?.close();
  });

  function connectTo(d: DesiredDatabase, host = d.hostPrimary!) {
    return connectFrom({ source: '127.0.0.8', host, port: 3306, user: 'linroot', password: d.rootPassword!, ca: driver.db(d.id as number)!.caCertPem });
  }
  const op = (databaseId: number, body: Parameters<typeof runOperation>[2]) => runOperation(driver, databaseId, body);
  async function nodeCounts(id: number): Promise<number[]> {
    const c = agent.agent.database(id)!;
    const out: number[] = [];
    for (const k of c.nodeIndexes()) {
      out.push(await withAdmin(await c.adminTarget(k), async (x) => Number((await q(x, 'SELECT COUNT(*) AS n FROM app.t'))[0].n)));
    }
    return out;
  }

  it('3 nodes: snapshot from a replica, restore, and the replicas agree with the primary', async () => {
    const c = await connectTo(three);
    await c.query('INSERT INTO app.t VALUES (1), (2), (3)');
    await c.end();
    const snap = await op(21, { snapshot: { label: 'three_nodes', target: 'secondary' } });
    expect(snap.ok).toBe(true);
    expect(driver.db(21)!.backups.find((b) => b.id === snap.backupId)!.target).toBe('secondary');
    const c2 = await connectTo(three);
    await c2.query('INSERT INTO app.t VALUES (4), (5)');
    await c2.end();
    expect(await op(21, { restore: { backupId: snap.backupId } })).toMatchObject({ ok: true });
    await driver.waitFor(() => driver.db(21)?.status === 'active', 20_000, 'active after restore');
    expect(await nodeCounts(21)).toEqual([3, 3, 3]);
    const r = await connectTo(three, three.hostSecondary!);
    const [rows] = await r.query('SELECT id FROM app.t ORDER BY id');
    expect((rows as any[]).map((x) => x.id)).toEqual([1, 2, 3]);
    await r.end();
  });

  it('3 nodes: a backup that fails halfway leaves every node with the rows from before, and the error is reported', async () => {
    const c = await connectTo(three);
    await c.query('INSERT INTO app.t VALUES (10), (11)');
    await c.end();
    await craftBackup(stateDir, { databaseId: 21, id: 900, label: 'broken_sql', engineVersion: three.version!, sql: halfBrokenDump('app', 't') });
    const r = await op(21, { restore: { backupId: 900 } });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/^loading backup 900 failed: ERROR 1064 .*; the data from before the restore was put back$/);
    await driver.waitFor(() => driver.db(21)?.status === 'active', 20_000, 'active after the failed restore');
    // The agent waited for the replicas before answering: all three agree already.
    expect(await nodeCounts(21)).toEqual([5, 5, 5]);
    const w = await connectTo(three);
    const [rows] = await w.query('SELECT id FROM app.t ORDER BY id');
    expect((rows as any[]).map((x) => x.id)).toEqual([1, 2, 3, 10, 11]);
    await w.end();
  });

  it('3 nodes: a pending patch waits for the window, then rolls without losing a committed row', async () => {
    const pidsBefore = (await agent.runtime.list({ 'fulcrum.database': '21' })).map((n) => n.ref).sort();
    three = { ...three, binary: patched, generation: 2 };
    one = { ...one, binary: patched, generation: 2 };
    driver.setDatabases([three, one]);
    await driver.waitFor(() => driver.db(21)?.patchPending && driver.db(22)?.patchPending, 5000, 'patch pending');
    // Outside the window nothing restarts.
    await new Promise((r) => setTimeout(r, 1500));
    expect((await agent.runtime.list({ 'fulcrum.database': '21' })).map((n) => n.ref).sort()).toEqual(pidsBefore);
    expect(driver.db(21)!.status).toBe('active');

    const writer = startWriter(() => connectTo(three), 'app.t', 1000);
    await driver.waitFor(() => writer.acked.length > 10, 5000, 'writer running');
    const seen = driver.reports.length;
    const oldPrimary = driver.db(21)!.currentPrimary;
    clock.set(Date.UTC(2026, 2, 8, 20, 10, 0)); // Sunday 20:10, inside the window.
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.databases.find((d) => d.id === 21)?.status === 'updating'), 10_000, 'updating');
    await driver.waitFor(() => driver.db(21)?.status === 'active' && !driver.db(21)?.patchPending, 60_000, 'patched');
    await new Promise((r) => setTimeout(r, 500));
    const { longestGapMs } = await writer.stop();
    console.log(`3-node patch: ${writer.acked.length} rows acknowledged, ${writer.errors} errors, longest gap ${longestGapMs} ms`);
    expect(longestGapMs).toBeLessThan(5000);
    const nodes = await agent.runtime.list({ 'fulcrum.database': '21' });
    expect(nodes.every((n) => n.spec?.engine.binary === patched && n.state === 'running')).toBe(true);
    expect(nodes.map((n) => n.ref).some((p) => pidsBefore.includes(p))).toBe(false);
    expect(driver.db(21)!.currentPrimary).not.toBe(oldPrimary);
    const c = await connectTo(three);
    const [rows] = await c.query('SELECT id FROM app.t WHERE id >= 1000');
    const have = new Set((rows as any[]).map((x) => x.id));
    await c.end();
    expect(writer.acked.filter((v) => !have.has(v))).toEqual([]);
    await driver.waitFor(() => driver.db(21)?.status === 'active', 10_000, 'active');
  });

  it('1 node: the window also patched it (downtime); a patch now restarts it again and the writer resumes', async () => {
    await driver.waitFor(() => !driver.db(22)?.patchPending && driver.db(22)?.status === 'active', 30_000, '1-node patched in window');
    clock.set(Date.UTC(2026, 2, 9, 10, 0, 0)); // Monday again: outside the window.
    const before = (await agent.runtime.list({ 'fulcrum.database': '22' }))[0]!.ref;
    const writer = startWriter(() => connectTo(one), 'app.t', 5000);
    await driver.waitFor(() => writer.acked.length > 10, 5000, 'writer running');
    const r = await op(22, { patch: {} });
    expect(r).toMatchObject({ ok: true });
    const count = writer.acked.length;
    await driver.waitFor(() => writer.acked.length > count + 10, 15_000, 'writer resumed');
    await writer.stop();
    expect(writer.errors).toBeGreaterThan(0);
    expect((await agent.runtime.list({ 'fulcrum.database': '22' }))[0]!.ref).not.toBe(before);
    const c = await connectTo(one);
    const [rows] = await c.query('SELECT id FROM app.t WHERE id >= 5000');
    const have = new Set((rows as any[]).map((x) => x.id));
    await c.end();
    expect(writer.acked.filter((v) => !have.has(v))).toEqual([]);
  });

  it('suspend stops the nodes keeping data; resume brings them back without a degraded detour', async () => {
    one = { ...one, state: 'suspended', generation: 3 };
    three = { ...three, state: 'suspended', generation: 3 };
    driver.setDatabases([three, one]);
    await driver.waitFor(() => driver.db(22)?.status === 'suspended' && driver.db(21)?.status === 'suspended', 20_000, 'suspended');
    // The control plane learns that the suspension is complete from the converged generation.
    await driver.waitFor(() => driver.db(22)?.convergedGeneration === 3 && driver.db(21)?.convergedGeneration === 3, 5000, 'suspend converged');
    expect((await agent.runtime.list({ 'fulcrum.database': '22' })).map((n) => n.state)).toEqual(['stopped']);
    expect((await agent.runtime.list({ 'fulcrum.database': '21' })).map((n) => n.state)).toEqual(['stopped', 'stopped', 'stopped']);
    // Refused by the endpoint once its wait for a serving member is over (3 s), not by the
    // client's own connect timeout, which is longer here: that one would come on any fault.
    const refused = await connectFrom({ source: '127.0.0.8', host: one.hostPrimary!, port: 3306, user: 'linroot', password: one.rootPassword!, ca: driver.db(one.id as number)!.caCertPem, timeoutMs: 15_000 })
      .then((c) => c.end().then(() => null), (e: Error) => e);
    expect(String(refused)).toMatch(/ECONNRESET|Connection lost: The server closed the connection/);
    one = { ...one, state: 'running', generation: 4 };
    three = { ...three, state: 'running', generation: 4 };
    const seen = driver.reports.length;
    driver.setDatabases([three, one]);
    await driver.waitFor(() => driver.db(22)?.status === 'active' && driver.db(21)?.status === 'active', 30_000, 'resumed');
    await driver.waitFor(() => driver.db(22)?.convergedGeneration === 4 && driver.db(21)?.convergedGeneration === 4, 5000, 'resume converged');
    const statuses = new Set(driver.reports.slice(seen).flatMap((r) => r.databases.map((d) => d.status)));
    expect([...statuses].filter((x) => x === 'degraded' || x === 'failed')).toEqual([]);
    const c = await connectTo(one);
    const [rows] = await c.query('SELECT COUNT(*) AS n FROM app.t');
    expect(Number((rows as any[])[0].n)).toBeGreaterThan(10);
    await c.end();
    const w = await connectTo(three);
    await w.query('INSERT INTO app.t VALUES (9999)');
    await w.end();
    let counts = await nodeCounts(21);
    for (let i = 0; i < 50 && new Set(counts).size > 1; i++) {
      await new Promise((r) => setTimeout(r, 100));
      counts = await nodeCounts(21);
    }
    expect(new Set(counts).size).toBe(1);
  });
});
