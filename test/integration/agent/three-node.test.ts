// integration-lane: concurrent (agent-fixture slot 22: its own 127.76/78/79.22 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 7 and 8, agent side, 3 nodes semi_synch with the process runtime: provisioning time,
 * semi-sync really on (status variables), reads through hosts.secondary, agent restart, then
 * failover after killing the primary (no acknowledged row lost, degraded then active), and
 * delete leaving nothing.
 */
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createRegistry } from '../../../lib/metrics.js';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { withAdmin, globalStatus, q } from '../../../agent/mysql/admin.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('agent: 3-node semi_synch cluster (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let stateDir: string;
  let db: DesiredDatabase;
  const net = testNet('127.78', 22);
  let registry = createRegistry('agent');
  const connect = (host: string) =>
    connectFrom({ source: '127.0.0.5', host, port: 3306, user: 'linroot', password: 'Initial.Pass_01', ca: driver.db(3)!.caCertPem });

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-three', slot: 22, extra: () => ({ registry: (registry = createRegistry('agent')) }) });
    ({ driver, stateDir } = fx);
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({
      id: 3, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'semi_synch',
      hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.0/24'],
    });
  });

  afterAll(async () => {
    await fx?.close();
  });

  it('reaches active in under 30 s with one primary and two failover members', async () => {
    const t0 = Date.now();
    driver.setDatabases([db]);
    const obs = await driver.waitFor(() => driver.db(3)?.status === 'active' && driver.db(3), 40_000, 'active');
    const seconds = (Date.now() - t0) / 1000;
    console.log(`3-node semi_synch cluster active after ${seconds.toFixed(2)} s`);
    expect(seconds).toBeLessThan(30);
    expect(Object.values(obs.members).sort()).toEqual(['failover', 'failover', 'primary']);
  });

  it('semi-sync is really on: primary status ON with two semi-sync clients, replicas ON', async () => {
    const c = agent.agent.database(3)!;
    const p = c.state!.primary;
    await withAdmin(await c.adminTarget(p), async (x) => {
      expect(await globalStatus(x, 'Rpl_semi_sync_master_status')).toBe('ON');
      expect(await globalStatus(x, 'Rpl_semi_sync_master_clients')).toBe('2');
    });
    for (const k of [1, 2, 3].filter((i) => i !== p)) {
      await withAdmin(await c.adminTarget(k), async (x) => {
        expect(await globalStatus(x, 'Rpl_semi_sync_slave_status')).toBe('ON');
        expect(Number((await q(x, 'SELECT @@read_only AS r'))[0].r)).toBe(1);
      });
    }
  });

  it('a row written through hosts.primary is readable from hosts.secondary within a second', async () => {
    const w = await connect(db.hostPrimary!);
    await w.query('CREATE DATABASE app');
    await w.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await w.query('INSERT INTO app.t VALUES (1)');
    await w.end();
    const t0 = Date.now();
    let seen = false;
    while (!seen && Date.now() - t0 < 1000) {
      const r = await connect(db.hostSecondary!);
      const [rows] = await r.query('SELECT COUNT(*) AS n FROM app.t');
      seen = Number((rows as any[])[0].n) === 1;
      const [ro] = await r.query('SELECT @@read_only AS ro');
      expect((ro as any[])[0].ro).toBe(1);
      await r.end();
    }
    expect(seen).toBe(true);
    // Replicas refuse writes even from linroot.
    const r = await connect(db.hostSecondary!);
    await expect(r.query('INSERT INTO app.t VALUES (99)')).rejects.toThrow(/read-only|read_only/i);
    await r.end();
  });

  it('a restarted agent finds the three nodes without duplicates', async () => {
    const before = (await agent.runtime.list({})).map((n) => n.ref).sort();
    await agent.close();
    const seen = driver.reports.length;
    agent = await fx.startAgent();
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.hello) && driver.db(3)?.status === 'active', 15_000, 'active after restart');
    const after = (await agent.runtime.list({})).map((n) => n.ref).sort();
    expect(after).toEqual(before);
  });

  it('failover: killing the primary, writes work again within 15 s, no acknowledged row lost, degraded then active', async () => {
    const c = agent.agent.database(3)!;
    const oldPrimary = c.state!.primary;
    const acked: number[] = [];
    let stop = false;
    let id = 1000;
    let lastOk = Date.now();
    let longestGap = 0;
    const writer = (async () => {
      let conn: Awaited<ReturnType<typeof connect>> | undefined;
      while (!stop) {
        try {
          conn ??= await connect(db.hostPrimary!);
          const v = id++;
          await conn.query('INSERT INTO app.t VALUES (?)', [v]);
          acked.push(v);
          longestGap = Math.max(longestGap, Date.now() - lastOk);
          lastOk = Date.now();
        } catch {
          conn?.destroy();
          conn = undefined;
          await new Promise((r) => setTimeout(r, 100));
        }
        await new Promise((r) => setTimeout(r, 50));
      }
      conn?.destroy();
    })();
    await driver.waitFor(() => acked.length > 10, 5000, 'writer running');
    const killedAt = Date.now();
    await agent.runtime.kill(c.nodeName(oldPrimary));
    await driver.waitFor(() => driver.db(3)?.status === 'degraded', 10_000, 'degraded');
    const countAtKill = acked.length;
    await driver.waitFor(() => acked.length > countAtKill + 5, 15_000, 'writes resumed');
    const resumedAfter = (Date.now() - killedAt) / 1000;
    console.log(`writes resumed ${resumedAfter.toFixed(2)} s after the primary was killed`);
    expect(resumedAfter).toBeLessThan(15);
    await driver.waitFor(() => driver.db(3)?.status === 'active' && driver.db(3)!.currentPrimary !== '', 30_000, 'active again');
    stop = true;
    await writer;
    expect(c.state!.primary).not.toBe(oldPrimary);
    expect(driver.db(3)!.events.some((e) => e.action === 'database_failover')).toBe(true);
    expect(await registry.getSingleMetricAsString('fulcrum_agent_failovers_total')).toMatch(/fulcrum_agent_failovers_total\{[^}]*\} 1\b/);
    const obs = driver.db(3)!;
    expect(Object.values(obs.members).sort()).toEqual(['failover', 'failover', 'primary']);
    expect(obs.members[obs.currentPrimary]).toBe('primary');
    // Every acknowledged row is on the new primary and on both replicas.
    const r = await connect(db.hostPrimary!);
    const [rows] = await r.query('SELECT id FROM app.t WHERE id >= 1000');
    const have = new Set((rows as any[]).map((x) => x.id));
    expect(acked.filter((v) => !have.has(v))).toEqual([]);
    await r.end();
    for (const k of [1, 2, 3]) {
      const n = await withAdmin(await c.adminTarget(k), async (x) => {
        await x.query('SELECT MASTER_GTID_WAIT(?, 10)', [driver.db(3)!.nodes.find((m) => m.role === 'primary')!.gtidCurrentPos]);
        return Number((await q(x, 'SELECT COUNT(*) AS n FROM app.t WHERE id >= 1000'))[0].n);
      });
      expect(n).toBeGreaterThanOrEqual(acked.length);
    }
  });

  it('a replica lost with its data is rebuilt from a dump once the primary has purged its binlog', async () => {
    const c = agent.agent.database(3)!;
    const p = c.state!.primary;
    await withAdmin(await c.adminTarget(p), async (x) => {
      await x.query('FLUSH BINARY LOGS');
      const file = String((await q(x, 'SHOW MASTER STATUS'))[0].File);
      // A log a replica still reads is kept by PURGE; retry until only the current one is left.
      for (let i = 0; i < 100; i++) {
        await x.query(`PURGE BINARY LOGS TO '${file}'`);
        if ((await q(x, 'SHOW BINARY LOGS')).length === 1) break;
        await new Promise((r) => setTimeout(r, 50));
      }
      expect((await q(x, 'SHOW BINARY LOGS')).map((r) => r.Log_name)).toEqual([file]);
    });
    const w = await connect(db.hostPrimary!);
    await w.query('INSERT INTO app.t VALUES (5001), (5002)');
    await w.query("CREATE USER 'reader'@'%' IDENTIFIED BY 'Reader.Pass_1'");
    await w.query("GRANT SELECT ON app.* TO 'reader'@'%'");
    await w.end();
    const victim = [1, 2, 3].find((k) => k !== p)!;
    await agent.runtime.remove(c.nodeName(victim), { withData: true });
    await driver.waitFor(() => driver.db(3)?.status === 'degraded', 10_000, 'degraded');
    await driver.waitFor(() => driver.db(3)?.status === 'active' && driver.db(3)!.nodes.every((n) => n.role !== 'down'), 40_000, 'rebuilt');
    const counts = async () => {
      const out: number[] = [];
      for (const k of [1, 2, 3]) out.push(await withAdmin(await c.adminTarget(k), async (x) => Number((await q(x, 'SELECT COUNT(*) AS n FROM app.t'))[0].n)));
      return out;
    };
    let n = await counts();
    for (let i = 0; i < 50 && new Set(n).size > 1; i++) {
      await new Promise((r) => setTimeout(r, 100));
      n = await counts();
    }
    expect(new Set(n).size).toBe(1);
    expect(driver.db(3)!.events.some((e) => e.message === `node ${victim} rebuilt from a dump of the primary and rejoined as a replica`)).toBe(true);
    await withAdmin(await c.adminTarget(victim), async (x) => {
      // Loaded with the binlog off: the rebuilt node has no transactions of its own.
      const own = String((await q(x, 'SELECT @@gtid_binlog_pos AS g'))[0].g).split(',').filter((g) => g.split('-')[1] === String(victim));
      expect(own).toEqual([]);
      expect((await q(x, "SELECT COUNT(*) AS n FROM mysql.user WHERE User = 'reader'"))[0].n).toBe('1');
    });
    // Replication keeps flowing to the rebuilt node.
    const w2 = await connect(db.hostPrimary!);
    await w2.query('INSERT INTO app.t VALUES (5003)');
    await w2.end();
    await driver.waitFor(() => driver.db(3)?.nodes.every((m) => m.replicationOk), 5000, 'replicating');
  });

  it('delete leaves no process and no data directory', async () => {
    const pids = (await agent.runtime.list({})).map((n) => n.ref);
    driver.setDatabases([]);
    await driver.waitFor(() => driver.last() && !driver.db(3), 20_000, 'gone');
    expect(await agent.runtime.list({})).toEqual([]);
    for (const pid of pids) if (pid) expect(existsSync(`/proc/${pid}`)).toBe(false);
    expect(readdirSync(join(stateDir, 'databases'))).toEqual([]);
  });
});
