/**
 * Attack (docs/security/secrets.md, "Schema names are data"): a database customer names a schema
 * `--result-file=/some/path`. The agent's snapshot runs `mariadb-dump ... --databases <names>`;
 * before the fix the name was read as an option and the dump overwrote that path with the
 * agent's privileges. Now the name follows `--`: the file is never written, the snapshot holds
 * the schema, and a restore brings the schema and its row back as data.
 */
import { existsSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { zstdDecompressSync } from 'node:zlib';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { connectFrom, desiredDb, runOperation, testNet, type Driver } from '../integration/agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('security: schema names never become mariadb-dump options', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const net = testNet('127.78', 38);
  const victim = join(tmpdir(), `fulcrum-dump-victim-${process.pid}-${Date.now()}`);
  const evil = `--result-file=${victim}`;
  const quoted = '`' + evil.replace(/`/g, '``') + '`';

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-dump-args', slot: 38, reconcileIntervalMs: 300 });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 31, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(31)?.status === 'active', 60_000, 'active');
  });

  afterAll(async () => {
    await fx?.close();
    rmSync(victim, { force: true });
  });

  const connect = () => connectFrom({ source: '127.0.0.7', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(31)!.caCertPem });

  it('a schema named --result-file=<path> is backed up and restored as data, and the path is not written', async () => {
    // A file the attacker wants overwritten: it must keep its content.
    writeFileSync(victim, 'precious\n');
    const before = statSync(victim).mtimeMs;

    const c = await connect();
    await c.query(`CREATE DATABASE ${quoted}`);
    await c.query(`CREATE TABLE ${quoted}.t (id INT PRIMARY KEY, v VARCHAR(20))`);
    await c.query(`INSERT INTO ${quoted}.t VALUES (1, 'kept')`);
    await c.end();

    const snap = await runOperation(driver, 31, { snapshot: { label: 'with_evil_schema', target: 'primary' } }, 60_000);
    // Before the fix the dump truncated this file (and then failed): check it first.
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    expect(statSync(victim).mtimeMs).toBe(before);
    expect(snap).toMatchObject({ ok: true, error: '' });

    const dir = join(fx.stateDir, 'backups', '31', String(snap.backupId));
    const manifest = JSON.parse(readFileSync(join(dir, 'manifest.json'), 'utf8'));
    expect(manifest.databases).toContain(evil);
    const dump = zstdDecompressSync(readFileSync(join(dir, 'dump.sql.zst'))).toString('utf8');
    expect(dump).toContain(`CREATE DATABASE /*!32312 IF NOT EXISTS*/ ${quoted}`);
    expect(dump).toContain("(1,'kept')");

    // Change the data after the snapshot; the restore must bring back the snapshot's row.
    const c2 = await connect();
    await c2.query(`DELETE FROM ${quoted}.t`);
    await c2.end();
    const restore = await runOperation(driver, 31, { restore: { backupId: snap.backupId } }, 60_000);
    expect(restore).toMatchObject({ ok: true, error: '' });
    await driver.waitFor(() => driver.db(31)?.status === 'active', 30_000, 'active after restore');

    const c3 = await connect();
    const [schemas] = await c3.query('SELECT SCHEMA_NAME AS s FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = ?', [evil]);
    expect((schemas as any[]).map((r) => r.s)).toEqual([evil]);
    const [rows] = await c3.query(`SELECT id, v FROM ${quoted}.t`);
    expect(rows).toEqual([{ id: 1, v: 'kept' }]);
    await c3.end();
    expect(readFileSync(victim, 'utf8')).toBe('precious\n');
    expect(existsSync(victim)).toBe(true);
  });
});
