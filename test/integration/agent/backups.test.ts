// integration-lane: concurrent (agent-fixture slot 24: its own 127.76/78/79.24 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Issue 8, agent side, 1 node: snapshot then restore (rows after the snapshot gone, rows and
 * accounts before it back, linroot keeps its current password), a corrupted backup refused
 * with the data kept, the 3-snapshot limit, and auto backups at 00:00 UTC of an injected clock
 * keeping the newest 7; accounts and a schema changed between a backup's reads and its snapshot.
 */
import { existsSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { BACKUP_ACCOUNT_TRIES } from '../../../agent/backup/dump-backup.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../../lib/logger.js';
import { connectFrom, craftBackup, desiredDb, halfBrokenDump, runOperation, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('agent: backups and restore (1 node)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let stateDir: string;
  let db: DesiredDatabase;
  const clock = new ManualClock(Date.UTC(2026, 0, 1, 10, 0, 0));
  const net = testNet('127.78', 24);
  /** Run each time a backup is about to start mariadb-dump (its reads are done, its snapshot not yet taken). */
  let beforeDump: (() => Promise<void>) | undefined;
  /** The agent's process runtime, with an exec that calls beforeDump first. */
  const hooked = (stateDir: string): ContainerRuntime => {
    const rt = createProcessRuntime({ root: join(stateDir, 'runtime'), logger: silentLogger() });
    const w = Object.create(rt) as ContainerRuntime;
    w.exec = async (name, argv, io) => {
      if (argv[0] === 'mariadb-dump' && argv.includes('--master-data=2')) await beforeDump?.();
      return rt.exec(name, argv, io);
    };
    return w;
  };

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-backups', slot: 24, clock, reconcileIntervalMs: 300, extra: () => ({ runtime: hooked(fx.stateDir) }) });
    ({ driver, stateDir } = fx);
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 11, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(11)?.status === 'active', 30_000, 'active');
  });

  afterAll(async () => {
    await fx?.close();
  });

  const connect = (user = 'linroot', password = db.rootPassword!) =>
    connectFrom({ source: '127.0.0.7', host: db.hostPrimary!, port: 3306, user, password, ca: driver.db(11)!.caCertPem });

  const op = (body: Parameters<typeof runOperation>[2]) => runOperation(driver, 11, body, 30_000);
  const ids = async () => {
    const c = await connect();
    const [rows] = await c.query('SELECT id FROM app.t ORDER BY id');
    await c.end();
    return (rows as any[]).map((r) => r.id);
  };

  it('snapshot then restore: later rows gone, earlier rows and accounts back, linroot unchanged', async () => {
    const c = await connect();
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, v BLOB)');
    await c.query("INSERT INTO app.t VALUES (1, x'00ff'), (2, 'b'), (3, 'c')");
    await c.query('CREATE PROCEDURE app.count_t() SELECT COUNT(*) AS n FROM app.t');
    await c.query("CREATE USER 'appuser'@'%' IDENTIFIED BY 'App.Pass_1'");
    await c.query("GRANT SELECT ON app.* TO 'appuser'@'%'");
    await c.end();

    const r = await op({ snapshot: { label: 'before_changes', target: 'primary' } });
    expect(r).toMatchObject({ ok: true });
    expect(r.backupId).toBeGreaterThan(0);
    const info = driver.db(11)!.backups.find((b) => b.id === r.backupId)!;
    expect(info).toMatchObject({ label: 'before_changes', type: 'snapshot', status: 'ready' });
    expect(Number(info.sizeBytes)).toBeGreaterThan(0);

    const c2 = await connect();
    await c2.query("INSERT INTO app.t VALUES (4, 'd'), (5, 'e')");
    await c2.query('CREATE TABLE app.later (x INT)');
    await c2.query("DROP USER 'appuser'@'%'");
    await c2.end();
    // A credentials reset after the snapshot must not break the restore (linroot is re-applied).
    db = { ...db, rootPassword: 'After.Reset_77', generation: 2 };
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(11)?.convergedGeneration === 2, 10_000, 'password changed');

    const statuses = new Set<string>();
    const seen = driver.reports.length;
    const rr = await op({ restore: { backupId: r.backupId } });
    for (const rep of driver.reports.slice(seen)) for (const d of rep.databases) statuses.add(d.status);
    expect(rr).toMatchObject({ ok: true, error: '' });
    expect(statuses.has('restoring')).toBe(true);
    expect(await ids()).toEqual([1, 2, 3]);
    const c3 = await connect();
    const [tables] = await c3.query("SHOW TABLES FROM app LIKE 'later'");
    expect(tables).toEqual([]);
    const [proc] = await c3.query('CALL app.count_t()');
    expect(Number((proc as any[])[0][0].n)).toBe(3);
    const [blob] = await c3.query('SELECT HEX(v) AS h FROM app.t WHERE id = 1');
    expect((blob as any[])[0].h).toBe('00FF');
    await c3.end();
    const app = await connect('appuser', 'App.Pass_1');
    const [n] = await app.query('SELECT COUNT(*) AS n FROM app.t');
    expect(Number((n as any[])[0].n)).toBe(3);
    await app.end();
  });

  it('a corrupted backup is refused with a clear error and the data is kept', async () => {
    const r = await op({ snapshot: { label: 'to_corrupt', target: 'primary' } });
    expect(r.ok).toBe(true);
    const c = await connect();
    await c.query("INSERT INTO app.t VALUES (6, 'f')");
    await c.end();
    const file = join(stateDir, 'backups', '11', String(r.backupId), 'dump.sql.zst');
    const bytes = readFileSync(file);
    bytes[Math.floor(bytes.length / 2)] ^= 0xff;
    writeFileSync(file, bytes);
    const rr = await op({ restore: { backupId: r.backupId } });
    expect(rr.ok).toBe(false);
    expect(rr.error).toMatch(/backup \d+ is corrupted: its checksum .*nothing was changed/);
    expect(await ids()).toEqual([1, 2, 3, 6]);
    await driver.waitFor(() => driver.db(11)?.status === 'active', 5000, 'active');
  });

  it('at most 3 snapshots; deleting one makes room; bad labels are refused', async () => {
    expect(await op({ snapshot: { label: 'third', target: 'primary' } })).toMatchObject({ ok: true });
    const fourth = await op({ snapshot: { label: 'fourth', target: 'primary' } });
    expect(fourth.ok).toBe(false);
    expect(fourth.error).toMatch(/3 snapshot/);
    const dup = await op({ snapshot: { label: 'third', target: 'primary' } });
    expect(dup.error).toMatch(/already exists/);
    expect((await op({ snapshot: { label: 'bad label!', target: 'primary' } })).error).toMatch(/label/);
    const victim = driver.db(11)!.backups.find((b) => b.label === 'to_corrupt')!;
    expect(await op({ deleteBackup: { backupId: victim.id } })).toMatchObject({ ok: true });
    expect(driver.db(11)!.backups.some((b) => b.id === victim.id)).toBe(false);
    // The same delete again (an agent restarted before its answer arrived sends it anew) is
    // done, not "does not exist": that answer made the control plane list the gone backup ready.
    expect(await op({ deleteBackup: { backupId: victim.id } })).toMatchObject({ ok: true });
    const issued = driver.db(11)!.backups.map((b) => b.id);
    const fourthOk = await op({ snapshot: { label: 'fourth', target: 'primary' } });
    expect(fourthOk).toMatchObject({ ok: true });
    // Backup ids come from a sequence: never a deleted one's, never one still listed.
    expect(fourthOk.backupId).toBeGreaterThan(Math.max(victim.id, ...issued));
    expect(await op({ deleteBackup: { backupId: fourthOk.backupId } })).toMatchObject({ ok: true });
    const again = await op({ snapshot: { label: 'fourth', target: 'primary' } });
    expect(again.backupId).toBe(fourthOk.backupId + 1);
  });

  it('auto backups happen at 00:00 UTC of the injected clock and only the newest 7 remain', async () => {
    const autos = () => driver.db(11)!.backups.filter((b) => b.type === 'auto' && b.status === 'ready');
    // Still 2026-01-01 (the creation day): nothing is due before the next midnight.
    clock.set(Date.UTC(2026, 0, 1, 23, 59, 0));
    await new Promise((r) => setTimeout(r, 800));
    expect(autos()).toHaveLength(0);
    for (let day = 2; day <= 10; day++) {
      clock.set(Date.UTC(2026, 0, day, 0, 0, 5));
      await driver.waitFor(() => autos().some((b) => new Date(Number(b.createdMs)).getUTCDate() === day), 15_000, `auto backup of day ${day}`);
    }
    // Retention runs right after the backup is stored.
    await driver.waitFor(() => autos().length === 7, 5000, 'pruned to 7');
    const left = autos();
    expect(left).toHaveLength(7);
    expect(left.map((b) => new Date(Number(b.createdMs)).getUTCDate()).sort((a, b) => a - b)).toEqual([4, 5, 6, 7, 8, 9, 10]);
    expect(left[0]!.label).toMatch(/^Scheduled - 01\/\d\d\/26 00:00 UTC-/);
    // Snapshots are not touched by the auto retention.
    expect(driver.db(11)!.backups.filter((b) => b.type === 'snapshot')).toHaveLength(3);
  });

  it('a backup that passes the checksum but fails halfway: the restore fails, naming the error, and no row is lost', async () => {
    const before = await ids();
    expect(before).toEqual([1, 2, 3, 6]);
    const id = 900;
    await craftBackup(stateDir, { databaseId: 11, id, label: 'broken_sql', engineVersion: db.version!, sql: halfBrokenDump('app', 't') });
    const seen = driver.reports.length;
    const r = await op({ restore: { backupId: id } });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/^loading backup 900 failed: ERROR 1064 .*SQL syntax.*; the data from before the restore was put back$/);
    await driver.waitFor(() => driver.db(11)?.status === 'active', 10_000, 'active again');
    expect(await ids()).toEqual(before);
    // Accounts are part of the safety copy too.
    const app = await connect('appuser', 'App.Pass_1');
    await app.end();
    // The safety copy was never a customer backup.
    const listed = driver.reports.slice(seen).flatMap((rep) => rep.databases.find((d) => d.id === 11)?.backups ?? []);
    expect(listed.filter((b) => Number(b.id) === 0 || b.type === 'pre-restore')).toEqual([]);
    expect(existsSync(join(stateDir, 'backups', '11', '0'))).toBe(false);
    const after = driver.reports.length;
    await driver.waitFor(() => driver.reports.length > after + 1, 5000, 'agent still reporting');
  });

  it('a restore interrupted by an agent stop is undone when the agent starts again', async () => {
    const before = await ids();
    // What a restore had stored before it began replacing data: a real dump of the current data
    // as its safety copy, and the flag in the database's state.
    const c = fx.agent!.agent.database(11)!;
    const dumped = await fx.agent!.runtime.exec(
      c.nodeName(c.state!.primary),
      ['mariadb-dump', '--user=root', '--single-transaction', '--routines', '--triggers', '--hex-blob', '--add-drop-database', '--databases', 'app'],
      { env: { MYSQL_PWD: c.state!.adminPassword } },
    );
    expect(dumped.exitCode).toBe(0);
    await craftBackup(stateDir, { databaseId: 11, id: 0, label: 'pre-restore', type: 'pre-restore', engineVersion: db.version!, sql: Buffer.from(dumped.stdout) });
    // Then the load got half way: the customer's rows are gone.
    const w = await connect();
    await w.query('DELETE FROM app.t');
    await w.query('INSERT INTO app.t VALUES (424242, NULL)');
    await w.end();
    await fx.agent!.close();
    const statePath = join(stateDir, 'databases', '11', 'state.json');
    const state = JSON.parse(readFileSync(statePath, 'utf8'));
    writeFileSync(statePath, JSON.stringify({ ...state, restoreInProgress: { backupId: 1, startedMs: Date.now() } }));

    const seen = driver.reports.length;
    await fx.startAgent();
    await driver.waitFor(() => driver.reports.slice(seen).some((r) => r.hello) && driver.db(11)?.status === 'active' && !existsSync(join(stateDir, 'backups', '11', '0')), 20_000, 'interrupted restore undone');
    expect(await ids()).toEqual(before);
    expect(JSON.parse(readFileSync(statePath, 'utf8')).restoreInProgress).toBeUndefined();
    const events = driver.reports.slice(seen).flatMap((r) => r.databases.find((d) => d.id === 11)?.events ?? []);
    expect(events.some((e) => /interrupted; the data from before it was put back/.test(String(e.message)))).toBe(true);
  });

  it('backup ids keep counting up across an agent restart, past deleted ids and ids already in storage', async () => {
    // broken_sql (id 900) was put into storage behind the agent's back; the snapshots the agent
    // issued itself are deleted from the highest id down until there is room for one more.
    const own = driver.db(11)!.backups.filter((b) => b.type === 'snapshot' && b.label !== 'broken_sql').sort((a, b) => b.id - a.id);
    expect(driver.db(11)!.backups.some((b) => b.id === 900)).toBe(true);
    for (const b of own.slice(0, own.length - 1)) expect(await op({ deleteBackup: { backupId: b.id } })).toMatchObject({ ok: true });
    const r = await op({ snapshot: { label: 'after_restart', target: 'primary' } });
    expect(r.error).toBe('');
    expect(r.backupId).toBe(901);
    expect(await op({ deleteBackup: { backupId: r.backupId } })).toMatchObject({ ok: true });
    const again = await op({ snapshot: { label: 'after_restart', target: 'primary' } });
    expect(again.backupId).toBe(902);
  });

  it('a backup from an older agent: rendered account text is refused before anything changes; an empty account section loads', async () => {
    const before = await ids();
    const c = fx.agent!.agent.database(11)!;
    const dumped = await fx.agent!.runtime.exec(
      c.nodeName(c.state!.primary),
      ['mariadb-dump', '--user=root', '--single-transaction', '--hex-blob', '--add-drop-database', '--databases', 'app'],
      { env: { MYSQL_PWD: c.state!.adminPassword } },
    );
    expect(dumped.exitCode).toBe(0);
    // What an older agent wrote: SHOW CREATE USER text, where a SUBJECT string ends the
    // statement (docs/security/mysql.md, "Account backups"). Never loaded, not even skipped.
    const legacy = "-- Fulcrum: customer accounts\n\nCREATE OR REPLACE USER `x`@`%` IDENTIFIED BY PASSWORD '' REQUIRE SUBJECT 'a'; CREATE DATABASE loot; -- ';\n";
    await craftBackup(stateDir, { databaseId: 11, id: 950, label: 'legacy_accounts', engineVersion: db.version!, sql: Buffer.concat([Buffer.from(legacy), Buffer.from(dumped.stdout)]) });
    const r = await op({ restore: { backupId: 950 } });
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/^backup 950 was taken by an older agent and holds the customer's accounts as text the server rendered.*nothing was changed$/);
    const w = await connect();
    const [dbs] = await w.query('SHOW DATABASES');
    expect((dbs as any[]).map((x) => x.Database)).not.toContain('loot');
    await w.end();
    expect(await ids()).toEqual(before);
    // The same with no accounts in it: the dump follows the header directly, and loads.
    await craftBackup(stateDir, { databaseId: 11, id: 951, label: 'legacy_empty', engineVersion: db.version!, sql: Buffer.concat([Buffer.from('-- Fulcrum: customer accounts\n\n'), Buffer.from(dumped.stdout)]) });
    const w2 = await connect();
    await w2.query('DELETE FROM app.t');
    await w2.end();
    expect(await op({ restore: { backupId: 951 } })).toMatchObject({ ok: true });
    expect(await ids()).toEqual(before);
  });

  it('SQL in a backup cannot make the client read a file of the host: the mariadb client runs with --local-infile=0', async () => {
    const before = await ids();
    const c = fx.agent!.agent.database(11)!;
    const secret = `marker-${process.pid}-${Date.now()}`;
    const marker = join(stateDir, 'loot-marker');
    writeFileSync(marker, `${secret}\n`, { mode: 0o600 });
    // Whatever put it there (a server that rendered account text unescaped, a binlog), this is
    // what a root session fed to the client would do: turn local_infile on and load the file.
    const sql = `-- Fulcrum: customer accounts v2 (rows of the privilege tables)\nSET GLOBAL local_infile=1;\nCREATE DATABASE IF NOT EXISTS loot;\nCREATE TABLE IF NOT EXISTS loot.f (l TEXT);\nLOAD DATA LOCAL INFILE '${marker}' INTO TABLE loot.f;\n`;
    await craftBackup(stateDir, { databaseId: 11, id: 952, label: 'local_infile', engineVersion: db.version!, sql: Buffer.from(sql) });
    try {
      const r = await op({ restore: { backupId: 952 } });
      const w = await connect();
      const [dbs] = await w.query('SHOW DATABASES');
      const loot = (dbs as any[]).some((x) => x.Database === 'loot') ? ((await w.query('SELECT l FROM loot.f'))[0] as any[]).map((x) => x.l) : [];
      await w.end();
      expect(loot).toEqual([]);
      expect(r.ok).toBe(false);
      expect(r.error).toMatch(/^loading backup 952 failed: ERROR 4166 .*local infile.*; the data from before the restore was put back$/);
      expect(await ids()).toEqual(before);
    } finally {
      await fx.agent!.runtime.exec(c.nodeName(c.state!.primary), ['mariadb', '--user=root', '-e', 'SET GLOBAL local_infile=0'], { env: { MYSQL_PWD: c.state!.adminPassword } });
    }
  });

  it('accounts and a schema changed between the backup\'s reads and its snapshot are restored as they were at the snapshot', async () => {
    for (const b of driver.db(11)!.backups.filter((x) => x.type === 'snapshot')) expect(await op({ deleteBackup: { backupId: b.id } })).toMatchObject({ ok: true });
    const run = async (...stmts: string[]) => {
      const w = await connect();
      for (const st of stmts) await w.query(st);
      await w.end();
    };
    await run("CREATE USER 'early'@'%' IDENTIFIED BY 'Early.Pass_1'", "GRANT SELECT ON app.* TO 'early'@'%'", "CREATE USER 'gone'@'%' IDENTIFIED BY 'Gone.Pass_1'");
    let dumps = 0;
    beforeDump = async () => {
      if (dumps++ > 0) return;
      await run("CREATE USER 'late'@'%' IDENTIFIED BY 'Late.Pass_1'", "GRANT SELECT ON app.* TO 'late'@'%'", "ALTER USER 'early'@'%' IDENTIFIED BY 'Early.Pass_2'",
        "DROP USER 'gone'@'%'", 'CREATE DATABASE late_db', 'CREATE TABLE late_db.t (id INT PRIMARY KEY)', 'INSERT INTO late_db.t VALUES (7)');
    };
    let r: Awaited<ReturnType<typeof op>>;
    try {
      r = await op({ snapshot: { label: 'accounts_window', target: 'primary' } });
    } finally {
      beforeDump = undefined;
    }
    expect(r).toMatchObject({ ok: true, error: '' });
    await run("DROP USER 'late'@'%'", "ALTER USER 'early'@'%' IDENTIFIED BY 'Early.Pass_3'", 'DROP DATABASE late_db');
    expect(await op({ restore: { backupId: r.backupId } })).toMatchObject({ ok: true, error: '' });
    // The accounts of the snapshot's moment: the password changed before it, the account created
    // before it (with its grant), and not the account dropped before it; the schema created before it.
    for (const [user, password] of [['early', 'Early.Pass_2'], ['late', 'Late.Pass_1']]) {
      const u = await connect(user, password);
      expect(((await u.query('SELECT COUNT(*) AS n FROM app.t'))[0] as any[]).length).toBe(1);
      await u.end();
    }
    await expect(connect('gone', 'Gone.Pass_1')).rejects.toThrow(/Access denied/);
    const w = await connect();
    expect(((await w.query('SELECT id FROM late_db.t'))[0] as any[]).map((x) => x.id)).toEqual([7]);
    await w.end();
    // The first dump was thrown away: its snapshot came after statements the reads had not seen.
    expect(dumps).toBe(2);
  });

  it('a backup whose accounts change at every try fails with the positions, no statement text, and leaves nothing in the store', async () => {
    const stored = readdirSync(join(stateDir, 'backups', '11')).sort();
    let dumps = 0;
    beforeDump = async () => {
      dumps++;
      const w = await connect();
      await w.query("ALTER USER 'early'@'%' IDENTIFIED BY 'Early.Pass_4'");
      await w.end();
    };
    let r: Awaited<ReturnType<typeof op>>;
    try {
      r = await op({ snapshot: { label: 'always_changing', target: 'primary' } });
    } finally {
      beforeDump = undefined;
    }
    expect(r.ok).toBe(false);
    expect(r.error).toMatch(/the customer's accounts or schemas changed on node \d between the backup's reading of them and its snapshot, 3 times in a row \(last at [^ ]+:\d+\)/);
    expect(r.error).not.toMatch(/ALTER|Early/);
    expect(dumps).toBe(BACKUP_ACCOUNT_TRIES);
    expect(readdirSync(join(stateDir, 'backups', '11')).sort()).toEqual(stored);
    expect(driver.db(11)!.backups.some((b) => b.label === 'always_changing')).toBe(false);
  });
});
