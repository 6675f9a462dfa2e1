/**
 * Attack (docs/security/mysql.md, "Account backups"): a customer holding
 * linroot (CREATE USER) makes an account whose REQUIRE SUBJECT string ends the statement and
 * carries its own: grant linroot everything, turn local_infile on, and LOAD DATA LOCAL a file
 * of the agent's host into a schema of its own. MariaDB 10.11 prints the string unescaped in
 * SHOW CREATE USER / SHOW GRANTS; an agent that wrote that text into backups and replayed it
 * with `mariadb --user=root` on restore ran the statements as root, and the client (run by the
 * agent) read the file. The attack goes through the API: snapshot, restore, fork. Now the
 * account is carried as privilege-table rows quoted by the driver (it comes back exactly as
 * made, payload and all, as a string), the client runs with --local-infile=0, and the guard
 * puts back linroot's privileges if a root session ever changes them.
 */
import { chmodSync, chownSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineOfSeries } from '../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, until, waitStatus, type DbLab, type RuntimeKind } from '../e2e/databases/db-lab.js';

const CLIENT = '127.0.0.2';

describe.each(['process', 'docker'] as RuntimeKind[])('security: account SQL in backups cannot run as root (%s runtime)', (runtime) => {
  let lab: DbLab;
  let src: any;
  let marker = '';
  const secret = `fulcrum-marker-${process.pid}-${Date.now()}`;
  let grantsBefore: string[] = [];
  let usersBefore: string[] = [];
  /** SHOW CREATE USER of those of the two attacking accounts that exist. */
  const shownUsers = async (c: mysql.Connection) => {
    const out: string[] = [];
    for (const u of ['x', 'x2']) {
      if ((await rows(c, "SELECT 1 FROM mysql.global_priv WHERE User = ? AND Host = '%'", [u])).length === 0) continue;
      out.push(String(Object.values((await rows(c, "SHOW CREATE USER ?@'%'", [u]))[0])[0]));
    }
    return out;
  };

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const linroot = async (d: any) => {
    const password = (await ok('GET', `${MYSQL}/${d.id}/credentials`)).password as string;
    const ca = Buffer.from((await ok('GET', `${MYSQL}/${d.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    return connectFrom({ source: CLIENT, host: d.hosts.primary, port: 3306, user: 'linroot', password, ca });
  };
  const rows = async (c: mysql.Connection, sql: string, params?: unknown[]) => (await c.query(sql, params))[0] as any[];
  /** linroot's grants without its password hash (a fork's linroot has a password of its own). */
  const grants = async (c: mysql.Connection) =>
    (await rows(c, 'SHOW GRANTS FOR CURRENT_USER()')).map((r) => String(Object.values(r)[0]).replace(/ IDENTIFIED BY PASSWORD '[^']*'/, '')).sort();
  const events = async (d: any, action: string) =>
    (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.action === action && e.entity?.id === d.id);

  /** What the attack must not have left: linroot's grants changed, a `loot` schema, the marker's text anywhere. */
  const assertUntouched = async (d: any, accounts: 'carried' | 'when-present') => {
    const c = await linroot(d);
    try {
      expect(await grants(c)).toEqual(grantsBefore);
      const schemas = (await rows(c, 'SHOW DATABASES')).map((r) => String(r.Database));
      expect(schemas).not.toContain('loot');
      expect(schemas).toContain('app');
      expect((await rows(c, 'SELECT v FROM app.t ORDER BY v')).map((r) => r.v)).toEqual(['a', 'b']);
      // Every text column of every schema linroot can read (customer schemas and mysql).
      const cols = await rows(c,
        `SELECT TABLE_SCHEMA AS s, TABLE_NAME AS t, COLUMN_NAME AS c FROM information_schema.COLUMNS
          WHERE TABLE_SCHEMA NOT IN ('information_schema', 'performance_schema', 'sys')
            AND DATA_TYPE IN ('char', 'varchar', 'text', 'tinytext', 'mediumtext', 'longtext', 'blob', 'mediumblob', 'longblob')`);
      expect(cols.length).toBeGreaterThan(10);
      for (const col of cols) {
        const hit = await rows(c, 'SELECT COUNT(*) AS n FROM ??.?? WHERE ?? LIKE ?', [col.s, col.t, col.c, `%${secret}%`]);
        expect(Number(hit[0].n), `${col.s}.${col.t}.${col.c}`).toBe(0);
      }
      // The customer's account itself is carried, exactly as made: its subject is a string.
      // A restore carries the accounts exactly. A fork replaying the binlog leaves out account
      // statements that name linroot (agent/binlog/replay.ts), as these do: any it has are exact.
      const shown = await shownUsers(c);
      if (accounts === 'carried') expect(shown).toEqual(usersBefore);
      else for (const u of shown) expect(usersBefore).toContain(u);
    } finally {
      await c.end();
    }
  };

  beforeAll(async () => {
    lab = await startDbLab(`acct-sql-${runtime}`, runtime);
    await lab.startAgent();
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines);
    const created = await ok('POST', MYSQL, { label: `acct-sql-${runtime}`, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'] });
    src = await waitStatus(lab, created.id, 'active', 240_000);
    // The file the injected LOAD DATA LOCAL reads: 0600 in the agent's state folder, where the
    // process runtime's client runs as the agent; in the node's own folder for docker, where
    // the client runs in the node's container as the node's uid.
    const node = (await lab.nodes()).find((n) => n.name.includes(`-db${src.id}-`))!;
    const nodeDir = join(lab.agentDir, 'runtime', 'nodes', node.name);
    const hostFile = runtime === 'process' ? join(lab.agentDir, 'loot-marker') : join(nodeDir, 'loot-marker');
    writeFileSync(hostFile, `${secret}\n`, { mode: 0o600 });
    chmodSync(hostFile, 0o600);
    if (runtime === 'docker') {
      const st = statSync(join(nodeDir, 'run'));
      chownSync(hostFile, st.uid, st.gid);
    }
    marker = runtime === 'process' ? hostFile : '/fulcrum/loot-marker';
    if (runtime === 'docker') expect(readdirSync(nodeDir)).toContain('loot-marker');

    const c = await linroot(src);
    try {
      grantsBefore = await grants(c);
      await c.query('CREATE DATABASE app');
      await c.query('CREATE TABLE app.t (v VARCHAR(10))');
      await c.query("INSERT INTO app.t VALUES ('a'), ('b')");
      // Ends the SUBJECT string as SHOW CREATE USER prints it, then: linroot gets everything,
      // and the client loads the marker into loot.f. IF NOT EXISTS: SHOW GRANTS repeats it.
      const payload = `a'; GRANT ALL PRIVILEGES ON *.* TO 'linroot'@'%' WITH GRANT OPTION; SET GLOBAL local_infile=1; `
        + `CREATE DATABASE IF NOT EXISTS loot; CREATE TABLE IF NOT EXISTS loot.f (l TEXT); LOAD DATA LOCAL INFILE '${marker}' INTO TABLE loot.f; -- `;
      await c.query("CREATE USER 'x'@'%' IDENTIFIED BY 'Xx.Pass_01' REQUIRE SUBJECT ?", [payload]);
      // The same where only backslashes go unescaped: ISSUER (printed first) ends in `\`, so its
      // closing quote is escaped and SUBJECT's opening quote closes the string.
      await c.query("CREATE USER 'x2'@'%' IDENTIFIED BY 'Xx.Pass_01' REQUIRE ISSUER 'x\\\\' AND SUBJECT ?", [payload.slice(2)]);
      // MariaDB 10.11.19 (this lab's) escapes both in SHOW CREATE USER / SHOW GRANTS; the issue
      // was reproduced on a server that did not. The agent no longer depends on either.
      usersBefore = await shownUsers(c);
    } finally {
      await c.end();
    }
  }, 300_000);

  afterAll(async () => {
    await lab?.close();
    rmSync(marker, { force: true });
  });

  it('a snapshot restored through the API runs none of it as root and reads no file', async () => {
    await ok('POST', `${MYSQL}/${src.id}/backups`, { label: 'with_x' });
    await waitStatus(lab, src.id, 'active', 120_000);
    const b = await until('snapshot listed', async () => (await ok('GET', `${MYSQL}/${src.id}/backups`)).data.find((x: any) => x.label === 'with_x'), 60_000, 200);
    expect(await ok('POST', `${MYSQL}/${src.id}/backups/${b.id}/restore`)).toEqual({});
    const done = await until('restore finished or failed', async () =>
      (await events(src, 'database_backup_restore')).find((e: any) => e.status === 'finished' || e.status === 'failed'), 180_000, 250);
    await waitStatus(lab, src.id, 'active', 120_000);
    await assertUntouched(src, 'carried');
    expect(done.status).toBe('finished');
  }, 400_000);

  it('a fork through the API runs none of it as root and reads no file', async () => {
    await until('oldest_restore_time', async () => (await ok('GET', `${MYSQL}/${src.id}`)).oldest_restore_time ?? undefined, 180_000, 250);
    // No restore_time: the fork holds everything committed before the request, the restore the
    // test just ran included, even within the same second (docs/databases.md).
    const fork = await ok('POST', MYSQL, {
      label: `acct-sql-fork-${runtime}`, region: 'us-east', type: 'g6-nanode-1', engine: `${src.engine}/${src.version}`, cluster_size: 1,
      allow_list: ['0.0.0.0/0'], fork: { source: src.id },
    });
    const forked = await waitStatus(lab, fork.id, 'active', 300_000);
    await assertUntouched(forked, 'when-present');
  }, 500_000);

  it('linroot given more (or less) than its designed privileges by a root session is put back', async () => {
    const node = (await lab.nodes()).find((n) => n.name.includes(`-db${src.id}-`))!;
    const state = JSON.parse(readFileSync(join(lab.agentDir, 'databases', String(src.id), 'state.json'), 'utf8')) as { adminPassword: string };
    const root = await mysql.createConnection({ socketPath: join(lab.agentDir, 'runtime', 'nodes', node.name, 'run', 'mysqld.sock'), user: 'root', password: state.adminPassword });
    try {
      for (const sql of ["GRANT ALL PRIVILEGES ON *.* TO 'linroot'@'%' WITH GRANT OPTION", "GRANT SUPER, FILE ON *.* TO 'linroot'@'%'", "REVOKE ALL PRIVILEGES, GRANT OPTION FROM 'linroot'@'%'"]) {
        await root.query(sql);
        await until(`linroot repaired after ${sql}`, async () => {
          const c = await linroot(src).catch(() => undefined);
          if (!c) return undefined;
          try {
            return JSON.stringify(await grants(c)) === JSON.stringify(grantsBefore) || undefined;
          } finally {
            await c.end();
          }
        }, 60_000, 300);
      }
    } finally {
      await root.end();
    }
  }, 300_000);
});
