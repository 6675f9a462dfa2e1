// integration-lane: concurrent (agent-fixture slot 30: its own 127.76/78/79.30 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * A physical fork whose agent is SIGKILLed in the middle (docs/agent.md §6, "Retry of a fork"):
 * once where every node of the fork has just started on the source's restored copy (before root,
 * replication and GTID state are made the fork's), once after the first binlog segment was
 * replayed. Each time the next agent start must finish the fork: exactly the rows up to the
 * chosen second (none applied twice), the fork's credentials working (the source's not),
 * nothing left behind. Process runtime, real mariadbd; the agent runs as its own OS process and
 * stops itself at the step through a test-only crash point (docs/testing.md, "Crash points").
 */
import type { ChildProcess } from 'node:child_process';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { q, withAdmin } from '../../../agent/mysql/admin.js';
import { LABEL_DATABASE } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { dbServers } from '../../helpers/db-servers.js';
import { middleSecond, startRowWriter, type WrittenRow } from '../../helpers/row-writer.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

const SOURCE = 41;
const CLIENT = '127.0.0.11';

describe('agent: a physical fork interrupted by a SIGKILL of the agent is finished by the next start', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let stateDir: string;
  let child: ChildProcess | undefined;
  let src: DesiredDatabase;
  /** The chosen second, and every row sent to the source with when it was sent and acknowledged. */
  let T = 0;
  let sent: readonly WrittenRow[] = [];
  const runtime = () => createProcessRuntime({ root: join(stateDir, 'runtime'), logger: silentLogger() });
  const stateOf = (id: number) => JSON.parse(readFileSync(join(stateDir, 'databases', String(id), 'state.json'), 'utf8'));
  const connectTo = (d: DesiredDatabase) =>
    connectFrom({ source: CLIENT, host: d.hostPrimary!, port: 3306, user: 'linroot', password: d.rootPassword!, ca: driver.db(Number(d.id))!.caCertPem });

  /** Starts an agent armed with crash point `at`, asks for the fork, and waits for the SIGKILL. */
  async function forkUntilCrash(fork: DesiredDatabase, at: string, others: DesiredDatabase[]): Promise<void> {
    if (child) {
      const gone = new Promise((r) => child!.once('exit', r));
      child.kill('SIGKILL');
      await gone;
    }
    child = await fx.spawnAgent({ FULCRUM_CRASH_AT: at });
    const dead = new Promise<NodeJS.Signals | null>((r) => child!.once('exit', (_c, signal) => r(signal)));
    driver.setDatabases([src, ...others, fork]);
    const signal = await Promise.race([dead, new Promise<string>((r) => setTimeout(() => r('no crash within 180 s'), 180_000))]);
    expect(signal).toBe('SIGKILL');
    child = undefined;
    expect(stateOf(Number(fork.id)).forkSeeding).toBe(true);
    expect(stateOf(Number(fork.id)).provisioned).toBeFalsy();
  }

  /** The next start finishes the fork; then it holds exactly the rows up to T and nothing is left behind. */
  async function finishedCleanly(fork: DesiredDatabase): Promise<void> {
    const id = Number(fork.id);
    child = await fx.spawnAgent();
    await driver.waitFor(() => driver.db(id)?.status === 'active', 240_000, `fork ${id} active after the restart`);
    // Exactly the rows the source stamped before the chosen second, on every node of the fork.
    const s = await connectTo(src);
    const [all] = await s.query('SELECT id, ts FROM app.t ORDER BY id');
    await s.end();
    const expected = (all as any[]).filter((r) => Math.floor(Number(r.ts)) * 1000 < T).map((r) => Number(r.id));
    expect(expected.length).toBeGreaterThan(0);
    expect(expected.length).toBeLessThan((all as any[]).length);
    for (const r of sent) if (r.ackMs < T) expect(expected).toContain(r.id);
    const f = await connectTo(fork);
    const [got] = await f.query('SELECT id FROM app.t ORDER BY id');
    expect((got as any[]).map((r) => Number(r.id))).toEqual(expected);
    // The fork is writable and its own database.
    await f.query('INSERT INTO app.t VALUES (?, UNIX_TIMESTAMP(NOW(6)))', [1_000_000]);
    await f.end();
    const st = stateOf(id);
    expect(st.forkBase?.kind).toBe('physical');
    expect(st.forkSeeding).toBeUndefined();
    expect(st.provisioned).toBe(true);

    const srcAdmin = stateOf(SOURCE).adminPassword as string;
    const nodes = await runtime().list({ [LABEL_DATABASE]: String(id) });
    expect(nodes).toHaveLength(fork.clusterSize!);
    const procs = readdirSync('/proc').filter((p) => /^\d+$/.test(p)).map((p) => {
      try {
        return readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0').join(' ');
      } catch {
        return '';
      }
    });
    for (const n of nodes) {
      expect(n.state).toBe('running');
      const { socketPath } = await runtime().connection(n.name);
      // Root answers to the fork's admin password only; every node holds every row.
      await expect(withAdmin({ socketPath, password: srcAdmin }, async () => undefined)).rejects.toThrow(/denied/i);
      const rows = await withAdmin({ socketPath, password: st.adminPassword }, async (x) => {
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
      expect(dbServers().filter((x) => x.datadir !== undefined && resolve(x.datadir) === resolve(n.spec!.dataDir))).toHaveLength(1);
    }
    // No unpacking or prepare of a fork's base still running (the fork's own archive may be
    // taking its first base meanwhile: that one is its own, in backup-tmp-*).
    expect(procs.filter((c) => c.includes('/fork-base'))).toEqual([]);
  }

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-fork-retry', slot: 30 });
    ({ driver, stateDir } = fx);
    const [engine] = await detectLocalCatalogue();
    src = desiredDb({ id: SOURCE, engineId: engine!.id, version: engine!.version, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'] });
    child = await fx.spawnAgent();
    driver.setDatabases([src]);
    await driver.waitFor(() => driver.db(SOURCE)?.status === 'active', 60_000, 'source active');
    const s = await connectTo(src);
    await s.query('CREATE DATABASE app');
    await s.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    // The archive's first round takes a physical base: from then on a fork can be built.
    await driver.waitFor(() => Number(driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 90_000, 'a restorable instant');
    await s.end();
    // A row every 100 ms, the chosen second in the middle, writes past its end. No failover
    // here: any failed write fails the setup.
    const began = Date.now();
    const writer = startRowWriter({ connect: () => connectTo(src), onError: 'fail' });
    sent = writer.rows;
    await writer.waitFor(() => Date.now() - began >= 6000 && sent.length >= 30, 120_000, 'rows for 6 s');
    T = middleSecond(began);
    await writer.waitFor(() => Date.now() >= T + 2500, 30_000, 'writes past the chosen second');
    await writer.stop();
    expect(sent.some((r) => r.ackMs < T) && sent.some((r) => r.sentMs >= T)).toBe(true);
  }, 240_000);

  afterAll(async () => {
    child?.kill('SIGKILL');
    await fx?.close();
  });

  const forkOf = (id: number, size: number, k: number) => desiredDb({
    id, engineId: src.engineId, version: src.version, clusterSize: size, replicationType: size > 1 ? 'asynch' : 'none', rootPassword: `Fork.Pass_${id}`,
    hostPrimary: `${fx.net}.${k}`, hostSecondary: `${fx.net}.${k + 1}`, allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T,
  });

  it('killed when its 3 nodes have just started on the source\'s copy: the next start finishes it', async () => {
    const fork = forkOf(42, 3, 3);
    await forkUntilCrash(fork, 'fork-restarted', []);
    // Where the agent stopped: every node of the fork runs the source's restored copy (its
    // tables, accounts and GTID history; root already has the fork's password, which the init
    // file sets at each start).
    const nodes = await runtime().list({ [LABEL_DATABASE]: '42' });
    expect(nodes).toHaveLength(3);
    for (const n of nodes) {
      expect(n.state).toBe('running');
      const { socketPath } = await runtime().connection(n.name);
      // The base was finished before the first row was written (rows wait for a restorable
      // instant), so the copy holds none of them. Whether it holds the table depends on whether
      // the archive's first base started before or after the CREATE TABLE: either is right.
      const tables = await withAdmin({ socketPath, password: stateOf(42).adminPassword }, (x) => q(x, "SELECT COUNT(*) AS n FROM information_schema.tables WHERE table_schema = 'app' AND table_name = 't'"));
      expect([0, 1]).toContain(Number(tables[0]!.n));
      if (Number(tables[0]!.n) === 1) {
        const rows = await withAdmin({ socketPath, password: stateOf(42).adminPassword }, (x) => q(x, 'SELECT COUNT(*) AS n FROM app.t'));
        expect(Number(rows[0]!.n)).toBe(0);
      }
    }
    await finishedCleanly(fork);
  }, 600_000);

  it('killed after its first binlog segment was replayed: the next start finishes it, no row applied twice', async () => {
    const fork = forkOf(43, 1, 5);
    await forkUntilCrash(fork, 'fork-replayed-segment', [forkOf(42, 3, 3)]);
    // Where the agent stopped: rows of the replay are in the fork already.
    const [n] = await runtime().list({ [LABEL_DATABASE]: '43' });
    const { socketPath } = await runtime().connection(n!.name);
    const rows = await withAdmin({ socketPath, password: stateOf(43).adminPassword }, (x) => q(x, 'SELECT COUNT(*) AS n FROM app.t'));
    expect(Number(rows[0]!.n)).toBeGreaterThan(0);
    await finishedCleanly(fork);
  }, 600_000);
});
