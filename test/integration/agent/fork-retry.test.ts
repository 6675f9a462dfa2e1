/**
 * A physical fork whose agent is SIGKILLed at its hardest point (docs/agent.md §6, "Binlog archive
 * and forks"): every node of the fork already runs the source's restored copy, root still with
 * the source's password, and the next agent start must finish the fork: exactly the rows up to
 * the chosen second, the fork's credentials working (the source's no longer), nothing left
 * behind. Process runtime, real mariadbd; the agent runs as its own OS process and stops itself
 * at the step through the test-only crash point (docs/testing.md, "Crash points").
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { q, withAdmin } from '../../../agent/mysql/admin.js';
import { LABEL_DATABASE } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

const SOURCE = 41;
const FORK = 42;
const CLIENT = '127.0.0.11';

describe('agent: a physical fork interrupted after its restored nodes started, before root got the fork\'s password', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let stateDir: string;
  let child: ChildProcess | undefined;
  let src: DesiredDatabase;
  const runtime = () => createProcessRuntime({ root: join(stateDir, 'runtime'), logger: silentLogger() });
  const stateOf = (id: number) => JSON.parse(readFileSync(join(stateDir, 'databases', String(id), 'state.json'), 'utf8'));

  async function spawnAgent(env: Record<string, string> = {}): Promise<ChildProcess> {
    const script = fileURLToPath(new URL('./agent-child.ts', import.meta.url));
    const c = spawn(process.execPath, ['--import', 'tsx', script], {
      env: { ...process.env, CONTROL_PLANE: driver.target, STATE_DIR: stateDir, NODE_POOL: fx.nodePool, AGENT_ID: 'agent-fork-retry', ...env },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    await new Promise<void>((resolve, reject) => {
      c.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
      c.once('exit', (code, signal) => reject(new Error(`agent exited with ${code ?? signal}`)));
    });
    return c;
  }

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-fork-retry', slot: 30 });
    ({ driver, stateDir } = fx);
    const [engine] = await detectLocalCatalogue();
    src = desiredDb({ id: SOURCE, engineId: engine!.id, version: engine!.version, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'] });
    // The crash point is armed from the start: only a physical fork reaches it.
    child = await spawnAgent({ FULCRUM_CRASH_AT: 'fork-restarted' });
    driver.setDatabases([src]);
    await driver.waitFor(() => driver.db(SOURCE)?.status === 'active', 60_000, 'source active');
  }, 120_000);

  afterAll(async () => {
    child?.kill('SIGKILL');
    await fx?.close();
  });

  it('the next agent start finishes the fork: exactly the rows up to the second, the fork\'s credentials, nothing left behind', async () => {
    const ca = () => driver.db(SOURCE)!.caCertPem;
    let s = await connectFrom({ source: CLIENT, host: src.hostPrimary!, port: 3306, user: 'linroot', password: src.rootPassword!, ca: ca() });
    await s.query('CREATE DATABASE app');
    await s.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    // The archive's first round takes a physical base: from then on a fork can be built.
    await driver.waitFor(() => Number(driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 90_000, 'a restorable instant');

    const sent: { id: number; sentMs: number; ackMs: number }[] = [];
    const began = Date.now();
    for (let id = 1; Date.now() - began < 6000 || sent.length < 30; id++) {
      const t0 = Date.now();
      await s.query('INSERT INTO app.t VALUES (?, UNIX_TIMESTAMP(NOW(6)))', [id]);
      sent.push({ id, sentMs: t0, ackMs: Date.now() });
      await new Promise((r) => setTimeout(r, Math.max(0, 100 - (Date.now() - t0))));
    }
    const T = Math.floor((began + Date.now()) / 2000) * 1000;
    for (let id = sent.length + 1; Date.now() < T + 2500; id++) {
      const t0 = Date.now();
      await s.query('INSERT INTO app.t VALUES (?, UNIX_TIMESTAMP(NOW(6)))', [id]);
      sent.push({ id, sentMs: t0, ackMs: Date.now() });
      await new Promise((r) => setTimeout(r, 100));
    }
    expect(sent.some((r) => r.ackMs < T + 1000) && sent.some((r) => r.sentMs >= T + 1000)).toBe(true);

    const fork = desiredDb({
      id: FORK, engineId: src.engineId, version: src.version, clusterSize: 3, replicationType: 'asynch', rootPassword: 'Fork.Pass_02',
      hostPrimary: `${fx.net}.3`, hostSecondary: `${fx.net}.4`, allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T,
    });
    const dead = new Promise<NodeJS.Signals | null>((r) => child!.once('exit', (_c, signal) => r(signal)));
    driver.setDatabases([src, fork]);
    const signal = await Promise.race([dead, new Promise<string>((r) => setTimeout(() => r('no crash within 180 s'), 180_000))]);
    expect(signal).toBe('SIGKILL');
    child = undefined;

    // Where the agent stopped: every node of the fork runs the source's restored copy (its
    // tables, its accounts, its GTID history; root already has the fork's password, which the
    // init file sets at each start), and the fork's state says its seeding began.
    const srcAdmin = stateOf(SOURCE).adminPassword as string;
    const forkAdmin = stateOf(FORK).adminPassword as string;
    expect(stateOf(FORK).forkSeeding).toBe(true);
    expect(stateOf(FORK).provisioned).toBeFalsy();
    const nodes = await runtime().list({ [LABEL_DATABASE]: String(FORK) });
    expect(nodes).toHaveLength(3);
    for (const n of nodes) {
      expect(n.state).toBe('running');
      const { socketPath } = await runtime().connection(n.name);
      // The base was taken before the rows were written: the source's table, none of its rows.
      const tables = await withAdmin({ socketPath, password: forkAdmin }, (x) => q(x, "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = 'app'"));
      expect(Number(tables[0]!.n)).toBe(1);
    }

    child = await spawnAgent();
    await driver.waitFor(() => driver.db(FORK)?.status === 'active', 240_000, 'fork active after the restart');

    // Exactly the rows the source stamped up to the chosen second, on the primary and both
    // replicas. (The agent's front proxy carried the first connection: it died with the agent.)
    s.destroy();
    s = await connectFrom({ source: CLIENT, host: src.hostPrimary!, port: 3306, user: 'linroot', password: src.rootPassword!, ca: ca() });
    const [all] = await s.query('SELECT id, ts FROM app.t ORDER BY id');
    const expected = (all as any[]).filter((r) => Math.floor(Number(r.ts)) * 1000 <= T).map((r) => Number(r.id));
    expect(expected.length).toBeGreaterThan(0);
    expect(expected.length).toBeLessThan((all as any[]).length);
    await s.end();
    const f = await connectFrom({ source: CLIENT, host: fork.hostPrimary!, port: 3306, user: 'linroot', password: fork.rootPassword!, ca: driver.db(FORK)!.caCertPem });
    const [got] = await f.query('SELECT id FROM app.t ORDER BY id');
    expect((got as any[]).map((r) => Number(r.id))).toEqual(expected);
    for (const r of sent) if (r.ackMs < T + 1000) expect(expected).toContain(r.id);
    // The fork is writable and its own database.
    await f.query('INSERT INTO app.t VALUES (?, UNIX_TIMESTAMP(NOW(6)))', [1_000_000]);
    await f.end();
    const st = stateOf(FORK);
    expect(st.forkBase?.kind).toBe('physical');
    expect(st.forkSeeding).toBeUndefined();
    expect(st.provisioned).toBe(true);

    const after = await runtime().list({ [LABEL_DATABASE]: String(FORK) });
    expect(after).toHaveLength(3);
    const procs = readdirSync('/proc').filter((p) => /^\d+$/.test(p)).map((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').join(' ');
      } catch {
        return '';
      }
    });
    for (const n of after) {
      expect(n.state).toBe('running');
      const { socketPath } = await runtime().connection(n.name);
      // Root answers to the fork's admin password only; the replicas hold every row.
      await expect(withAdmin({ socketPath, password: srcAdmin }, async () => undefined)).rejects.toThrow(/denied/i);
      const rows = await withAdmin({ socketPath, password: forkAdmin }, async (x) => {
        for (let i = 0; i < 200; i++) {
          if (Number((await q(x, 'SELECT COUNT(*) AS n FROM app.t'))[0]!.n) === expected.length + 1) break;
          await new Promise((r) => setTimeout(r, 100));
        }
        return q(x, 'SELECT id FROM app.t ORDER BY id');
      });
      expect(rows.map((r) => Number(r.id))).toEqual([...expected, 1_000_000]);
      // Nothing left behind: no unpacked base in the run folder, no mariadb-backup files in the
      // data directory, one server process per node.
      expect(existsSync(join(dirname(socketPath), 'fork-base'))).toBe(false);
      expect(readdirSync(n.spec!.dataDir).filter((e) => /^(xtrabackup_|mariadb_backup_|backup-my\.cnf)/.test(e))).toEqual([]);
      expect(procs.filter((c) => c.includes(`/nodes/${n.name}/my.cnf`))).toHaveLength(1);
    }
    // No unpacking or prepare of the fork's base still running (the fork's own archive may be
    // taking its first base meanwhile: that one is its own, in backup-tmp-*).
    expect(procs.filter((c) => c.includes('/fork-base'))).toEqual([]);
  }, 600_000);
});
