/**
 * Attack (docs/security/mysql.md, "A database customer stays in the database"): a customer
 * holding linroot, the only account Fulcrum gives them, tries to leave the database: read the
 * agent's files (every other tenant's password), write files, load a plugin, change server
 * variables, write the `mysql` schema, and lock the agent out by dropping or changing its
 * accounts. Before the fix linroot had ALL ON *.*, secure_file_priv was unset and mariadbd ran as
 * root: LOAD_FILE returned the agent's desired state. Now each attempt is refused, or (for the
 * accounts, which MariaDB's CREATE USER covers) repaired by the agent before it does harm, and
 * the server runs as an unprivileged uid of its own. What a schema owner needs still works.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from '../integration/agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

describe('security: linroot cannot escape the database (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const net = testNet('127.78', 35);
  const victim = join(tmpdir(), `fulcrum-dumpfile-${process.pid}-${Date.now()}`);
  let c: mysql.Connection;

  const linroot = () => connectFrom({ source: '127.0.0.2', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword!, ca: driver.db(41)!.caCertPem });
  const fails = (sql: string, conn = c) => conn.query(sql).then(() => null, (e: Error) => e);
  const state = () => JSON.parse(readFileSync(join(fx.stateDir, 'databases', '41', 'state.json'), 'utf8')) as { adminPassword: string; replPassword: string };
  const nodeSocket = () => join(fx.stateDir, 'runtime', 'nodes', readdirSync(join(fx.stateDir, 'runtime', 'nodes'))[0]!, 'run', 'mysqld.sock');
  const asRoot = async <T>(fn: (r: mysql.Connection) => Promise<T>): Promise<T> => {
    const r = await mysql.createConnection({ socketPath: nodeSocket(), user: 'root', password: state().adminPassword });
    try {
      return await fn(r);
    } finally {
      await r.end();
    }
  };
  const until = async (what: string, cond: () => Promise<boolean>, ms = 30_000) => {
    const end = Date.now() + ms;
    while (!(await cond().catch(() => false))) {
      if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
      await new Promise((r) => setTimeout(r, 200));
    }
  };

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-mysql-tenant', slot: 35, reconcileIntervalMs: 300 });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 41, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.2/32'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(41)?.status === 'active', 60_000, 'active');
    c = await linroot();
  });

  afterAll(async () => {
    await c?.end().catch(() => undefined);
    await fx?.close();
    rmSync(victim, { force: true });
  });

  it('LOAD_FILE of the agent state returns NULL; INTO DUMPFILE/OUTFILE and LOAD DATA fail and write nothing', async () => {
    for (const file of [join(fx.stateDir, 'desired.json'), join(fx.stateDir, 'databases', '41', 'state.json'), '/etc/passwd']) {
      expect(existsSync(file) || file === join(fx.stateDir, 'desired.json')).toBe(true);
      const [rows] = await c.query('SELECT LOAD_FILE(?) AS f', [file]);
      expect((rows as any[])[0].f).toBeNull();
    }
    // Refused for want of the FILE privilege, not for a wrong login or a bad statement.
    expect(String(await fails(`SELECT 'x' INTO DUMPFILE '${victim}'`))).toMatch(/FILE privilege/);
    expect(String(await fails(`SELECT 'x' INTO OUTFILE '${victim}'`))).toMatch(/FILE privilege/);
    expect(existsSync(victim)).toBe(false);
    await c.query('CREATE DATABASE IF NOT EXISTS app');
    await c.query('CREATE TABLE IF NOT EXISTS app.t (v TEXT)');
    // MariaDB refuses a LOAD DATA INFILE without FILE with its login-style access error (1045);
    // the connection stays open (the count below runs on it), so no login failed.
    const load = await fails(`LOAD DATA INFILE '/etc/passwd' INTO TABLE app.t`) as (Error & { errno?: number }) | null;
    expect(String(load)).toMatch(/Access denied for user 'linroot'@'127\.0\.0\.2'/);
    expect(load?.errno).toBe(1045);
    const [count] = await c.query('SELECT COUNT(*) AS n FROM app.t');
    expect(Number((count as any[])[0].n)).toBe(0);
  });

  it('the server itself is confined: secure_file_priv is an empty directory and local_infile is off', async () => {
    const [rows] = await c.query('SELECT @@secure_file_priv AS p, @@local_infile AS l');
    const r = (rows as any[])[0];
    expect(r.p).toMatch(/no-files\/?$/);
    expect(Number(r.l)).toBe(0);
  });

  it('INSTALL SONAME, SET GLOBAL, SHUTDOWN and KILL of the agent fail', async () => {
    expect(String(await fails("INSTALL SONAME 'server_audit'"))).toMatch(/denied/i);
    expect(String(await fails("INSTALL PLUGIN server_audit SONAME 'server_audit'"))).toMatch(/denied/i);
    expect(String(await fails("SET GLOBAL general_log_file = '/tmp/fulcrum-general.log'"))).toMatch(/denied|SUPER/i);
    expect(String(await fails("SET GLOBAL init_connect = 'SELECT 1'"))).toMatch(/denied|SUPER/i);
    expect(String(await fails('SET GLOBAL read_only = OFF'))).toMatch(/denied|SUPER/i);
    expect(String(await fails('SHUTDOWN'))).toMatch(/denied/i);
    expect(String(await fails('PURGE BINARY LOGS BEFORE NOW()'))).toMatch(/denied/i);
    expect(String(await fails('STOP SLAVE'))).toMatch(/denied/i);
  });

  it('the mysql schema is read-only to linroot: no self-granted privileges, plugin rows or routines as root', async () => {
    expect(String(await fails("UPDATE mysql.global_priv SET Priv = JSON_SET(Priv, '$.access', 549755813887) WHERE User = 'linroot'"))).toMatch(/denied/i);
    expect(String(await fails("INSERT INTO mysql.plugin VALUES ('server_audit', 'server_audit.so')"))).toMatch(/denied/i);
    expect(String(await fails('CREATE PROCEDURE mysql.p() SELECT 1'))).toMatch(/denied/i);
    expect(String(await fails('DROP TABLE mysql.plugin'))).toMatch(/denied/i);
    expect(String(await fails("CREATE DEFINER = 'root'@'localhost' PROCEDURE app.p() SELECT 1"))).toMatch(/denied|SUPER|SET USER/i);
    expect(String(await fails("CREATE USER evil@'%' IDENTIFIED BY 'Evil.Pass_01'"))).toBe('null');
    expect(String(await fails("GRANT FILE ON *.* TO evil@'%'"))).toMatch(/denied/i);
    expect(String(await fails("GRANT RELOAD ON *.* TO evil@'%'"))).toMatch(/denied/i);
    expect(String(await fails("GRANT ALL PRIVILEGES ON *.* TO evil@'%'"))).toMatch(/denied/i);
    expect(String(await fails("GRANT ALL PRIVILEGES ON mysql.* TO evil@'%'"))).toMatch(/denied/i);
  });

  it("an account linroot gives a pattern matching 'mysql' is pinned read-only on mysql by the agent", async () => {
    await c.query("CREATE USER sub@'127.0.0.2' IDENTIFIED BY 'Sub.Pass_01'");
    await c.query("GRANT ALL PRIVILEGES ON `%`.* TO sub@'127.0.0.2'");
    await until('sub pinned', () =>
      asRoot(async (r) => {
        const [rows] = await r.query("SELECT COUNT(*) AS n FROM mysql.db WHERE User = 'sub' AND Db = 'mysql'");
        return Number((rows as any[])[0].n) === 1;
      }), 10_000);
    const sub = await connectFrom({ source: '127.0.0.2', host: db.hostPrimary!, port: 3306, user: 'sub', password: 'Sub.Pass_01', ca: driver.db(41)!.caCertPem });
    expect(String(await fails("INSERT INTO mysql.plugin VALUES ('server_audit', 'server_audit.so')", sub))).toMatch(/denied/i);
    expect(String(await fails('CREATE PROCEDURE mysql.p() SELECT 1', sub))).toMatch(/denied/i);
    await sub.query('CREATE DATABASE subdb');
    await sub.query('DROP DATABASE subdb');
    await sub.end();
    await c.query("DROP USER sub@'127.0.0.2'");
  });

  it('what a schema owner and user manager needs still works', async () => {
    await c.query('CREATE DATABASE shop');
    await c.query('CREATE TABLE shop.items (id INT PRIMARY KEY, name VARCHAR(20), INDEX (name))');
    await c.query("INSERT INTO shop.items VALUES (1, 'a'), (2, 'b')");
    await c.query('ALTER TABLE shop.items ADD COLUMN price INT');
    await c.query('CREATE VIEW shop.v AS SELECT id FROM shop.items');
    await c.query('CREATE PROCEDURE shop.p() SELECT COUNT(*) FROM shop.items');
    await c.query('CREATE TRIGGER shop.tr BEFORE INSERT ON shop.items FOR EACH ROW SET NEW.price = 0');
    await c.query('CREATE EVENT shop.e ON SCHEDULE EVERY 1 DAY DO DELETE FROM shop.items WHERE id < 0');
    await c.query('CREATE TEMPORARY TABLE shop.tmp (x INT)');
    await c.query('LOCK TABLES shop.items WRITE');
    await c.query('UNLOCK TABLES');
    await c.query('FLUSH TABLES shop.items FOR EXPORT');
    await c.query('UNLOCK TABLES');
    await c.query("CREATE USER app@'%' IDENTIFIED BY 'App.Pass_01'");
    await c.query("GRANT SELECT, INSERT, UPDATE, DELETE ON shop.* TO app@'%'");
    await c.query("GRANT ALL PRIVILEGES ON shop.* TO app@'%' WITH GRANT OPTION");
    const [dbs] = await c.query('SHOW DATABASES');
    expect((dbs as any[]).map((r) => r.Database)).toEqual(expect.arrayContaining(['shop', 'app', 'mysql']));
    await c.query("DROP USER app@'%'");
    await c.query('DROP DATABASE shop');
  });

  it('dropping fulcrum_repl is repaired by the agent within seconds', async () => {
    expect(String(await fails("DROP USER fulcrum_repl@'%'"))).toBe('null');
    await until('fulcrum_repl re-created', () =>
      asRoot(async (r) => {
        const [rows] = await r.query("SELECT COUNT(*) AS n FROM mysql.global_priv WHERE User = 'fulcrum_repl' AND Host = '%'");
        return Number((rows as any[])[0].n) === 1;
      }));
    const repl = await mysql.createConnection({ host: `${testNet('127.79', 35)}.1`, port: 3306, user: 'fulcrum_repl', password: state().replPassword, ssl: { rejectUnauthorized: false } });
    await repl.end();
  });

  it('changing root@localhost locks the agent out only until it restarts the node, which restores root', async () => {
    await c.query("ALTER USER root@localhost IDENTIFIED BY 'Taken.Over_01'");
    await c.end().catch(() => undefined);
    await until('root@localhost restored', () => asRoot(async () => true), 60_000);
    await until('linroot served again', async () => {
      c = await linroot();
      return true;
    }, 30_000);
    const [rows] = await c.query('SELECT 1 AS one');
    expect((rows as any[])[0].one).toBe(1);
    await driver.waitFor(() => driver.db(41)?.status === 'active', 30_000, 'active again');
  });

  it('mariadbd runs as a non-root uid of its own, not the agent', async () => {
    const node = (await fx.agent!.runtime.list({}))[0]!;
    const pid = Number(node.ref);
    expect(pid).toBeGreaterThan(0);
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status)!.slice(1).map(Number);
    for (const u of uids) expect(u).not.toBe(0);
    expect(uids[0]).not.toBe(process.getuid?.());
  });

  it('a data dir left owned by root (an agent from before this change) is handed over and starts', async () => {
    const rt = fx.agent!.runtime;
    const node = (await rt.list({}))[0]!;
    await rt.stop(node.name);
    execFileSync('chown', ['-R', '0:0', node.spec!.dataDir]);
    await rt.start(node.name);
    const after = (await rt.inspect(node.name)).ref;
    expect(readFileSync(`/proc/${after}/status`, 'utf8')).not.toMatch(/^Uid:\s+0\b/m);
    await until('linroot served after the hand-over', async () => {
      const x = await linroot();
      await x.query('SELECT 1');
      await x.end();
      return true;
    });
  });
});
