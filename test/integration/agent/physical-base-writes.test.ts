// integration-lane: alone (it measures whether mariadb-backup keeps up with the redo log under heavy writes, which a neighbour's CPU decides: it failed beside the concurrent lane at load 2).
/**
 * A hidden physical base (mariadb-backup) taken while the server writes hard and the backup
 * storage is slow, as on a busy host: it must still be physical. Before the copy was spooled to a
 * local file first, mariadb-backup's output waited on gzip and storage, its redo-log copy fell
 * behind the server's 32 MB redo log ("Was only able to copy log ... try increasing
 * innodb_log_file_size"), and the base silently became a logical dump (docs/agent.md §6).
 * And when a copy does fail: the warning carries the tool's reason, a chain's first base falls
 * back to a dump, a base wanted only for fork speed does not.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { pino } from 'pino';
import { ManualClock } from '../../../lib/clock.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createBackupService } from '../../../agent/backup/backup-service.js';
import { createLocalBackupStorage, type BackupStorage } from '../../../agent/backup/backup-storage.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import { processesOf, slowSink } from './slow-io.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

/** Storage whose writers accept about `bytesPerS`: a backup host busy with other work. */
function slowStorage(inner: BackupStorage, bytesPerS: number): BackupStorage {
  return { ...inner, writer: async (db, id, file) => slowSink(await inner.writer(db, id, file), bytesPerS) };
}

describe('agent: physical bases under heavy writes, and when they fail (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const net = testNet('127.78', 29);

  beforeAll(async () => {
    // The agent's own archive takes its first base as soon as the database is up, and a round
    // a minute later takes another once 64 MB of binlog follow it, which this test's writes are:
    // beside this test's copy, two copies of one server at once, which the product never runs (a
    // database's archive rounds never overlap) and which made each other fail. One round only.
    fx = await createAgentFixture({ id: 'agent-physical-writes', slot: 29, reconcileIntervalMs: 300, extra: () => ({ binlogArchiveMs: 3_600_000 }) });
    ({ driver } = fx);
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 13, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(13)?.status === 'active', 60_000, 'active');
    // That first round's base is done before this test's copies start.
    await driver.waitFor(() => Number(driver.db(13)?.oldestRestoreMs ?? 0) > 0, 120_000, "the archive's first base");
  }, 180_000);

  afterAll(async () => {
    await fx?.close();
  });

  const connect = () => connectFrom({ source: '127.0.0.7', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(13)!.caCertPem });

  it('stays physical while every second rewrites more than the redo log holds', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, pad VARCHAR(1000) NOT NULL)');
    await c.query('USE app');
    await c.query('INSERT INTO app.t SELECT seq, REPEAT(MD5(seq), 30) FROM seq_1_to_20000');

    // Rewrites of the whole table (about 20 MB of row changes each) for as long as mariadb-backup
    // copies: what the copy must keep pace with. Writes after it has exited only lengthen the
    // redo log it spooled, and so the slow upload, by as long as the host took to copy: on a slow
    // CI host that upload once outlasted the test's 5 minutes.
    let writing = true;
    let rewrites = 0;
    const writer = (async () => {
      const w = await connect();
      try {
        while (writing) {
          await w.query('UPDATE app.t SET pad = REPEAT(MD5(id + ?), 30)', [++rewrites]);
        }
      } finally {
        await w.end();
      }
    })();

    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
    const storage = slowStorage(createLocalBackupStorage(join(fx.stateDir, 'slow-backups')), 1024 * 1024);
    const backups = createBackupService({ storage, runtime: fx.agent!.runtime, logger, clock: new ManualClock(Date.now()) });
    const ctl = fx.agent!.agent.databases().find((x) => x.id === 13)!;
    // Let the writes reach full speed before the copy starts.
    while (rewrites < 3) await new Promise((r) => setTimeout(r, 100));
    const primaryDir = join(fx.stateDir, 'runtime', 'nodes', ctl.nodeName(ctl.state!.primary));
    let copyS = 0;
    const copyDone = (async () => {
      const t0 = Date.now();
      await driver.waitFor(() => processesOf('mariadb-backup', primaryDir).length > 0 || !writing, 60_000, 'mariadb-backup started');
      await driver.waitFor(() => processesOf('mariadb-backup', primaryDir).length === 0, 240_000, 'mariadb-backup done');
      copyS = (Date.now() - t0) / 1000;
      writing = false;
    })();
    const t0 = Date.now();
    let m;
    try {
      m = await backups.takeBase(ctl);
    } finally {
      writing = false;
      await writer;
      await copyDone.catch(() => undefined);
      await c.end();
    }
    console.log(`[physical-base-writes] copy ${copyS.toFixed(1)} s under ${rewrites} rewrites; base ${(m.sizeBytes / 1048576).toFixed(1)} MB stored in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
    const warnings = lines.filter((l) => JSON.parse(l).level >= 40);
    expect(warnings).toEqual([]);
    expect(m.format).toBe('mariadb-backup+mbstream+zstd');
    expect(m.snapshotGtid).toMatch(/^0-1-\d+$/);
    // The writes really overlapped the copy: more rewrites than the 3 before it started.
    expect(rewrites).toBeGreaterThan(4);
    const stored = readFileSync(join(fx.stateDir, 'slow-backups', '13', String(m.id), m.file));
    expect(stored.length).toBe(m.sizeBytes);
    expect(createHash('sha256').update(stored).digest('hex')).toBe(m.sha256);
  }, 300_000);

  it("a failed copy says mariadb-backup's reason; a chain's first base falls back to a dump, a base for fork speed does not", async () => {
    const lines: string[] = [];
    const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
    const real = fx.agent!.runtime;
    // The server's own tool, made to fail the way it does when writes overtake it.
    const runtime = {
      ...real,
      exec: (name: string, argv: string[], io?: Parameters<typeof real.exec>[2]) => (argv[0] === 'mariadb-backup'
        ? Promise.resolve({ exitCode: 1, stdout: '', stderr: '[00] Streaming ./sys/statements_with_errors_or_warnings.frm\n[00] Was only able to copy log from 1 to 2, not 3; try increasing innodb_log_file_size\n[Note] InnoDB: Starting shutdown...\n' })
        : real.exec(name, argv, io)),
    };
    const dir = join(fx.stateDir, 'failing-backups');
    const backups = createBackupService({ storage: createLocalBackupStorage(dir), runtime, logger, clock: new ManualClock(Date.now()) });
    const ctl = fx.agent!.agent.databases().find((x) => x.id === 13)!;

    // What a copy interrupted by an agent crash leaves in the node's run folder goes with the next copy.
    const run = dirname((await real.connection(ctl.nodeName(ctl.state!.primary))).socketPath);
    writeFileSync(join(run, 'backup-spool-1000000999.mbstream'), 'stale');
    mkdirSync(join(run, 'backup-tmp-1000000999'));
    await expect(backups.takeBase(ctl, { physicalOnly: true })).rejects.toThrow(/Was only able to copy log from 1 to 2/);
    expect(await backups.refresh(13)).toEqual([]);
    expect(readdirSync(run).filter((f) => f.startsWith('backup-'))).toEqual([]);

    const m = await backups.takeBase(ctl);
    expect(m.format).toBe('mariadb-dump+zstd');
    expect((await backups.refresh(13)).map((x) => x.id)).toEqual([m.id]);
    const warnings = lines.map((l) => JSON.parse(l)).filter((l) => l.level >= 40);
    expect(warnings.map((w) => w.msg)).toEqual([
      'physical base backup failed; forks keep the older base',
      expect.stringMatching(/^physical base backup failed; taking a logical one: .*Was only able to copy log from 1 to 2.*Starting shutdown/),
    ]);
    // The reason, not the file names that happen to contain "error".
    expect(warnings[0].err).not.toContain('statements_with_errors');
  }, 120_000);
});
