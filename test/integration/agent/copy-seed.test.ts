// integration-lane: concurrent (the process runtime in its own temp root: servers on 127.0.0.1 and free ports, removed with their data).
/**
 * The dump seeds (agent/database/dump-seed.ts) against real MariaDB servers run by the process
 * runtime: a source standing for the primary and a target standing for the member being seeded.
 * The window between the copy's reading of the accounts and its snapshot is opened by the
 * runtime the seed is handed (a wrapper whose exec changes accounts on the source just before it
 * starts mariadb-dump): the member must end with the accounts of its data's position, and
 * account statements after it must replicate. A copy whose source is killed midway must leave
 * a member with no position that no later copy is loaded over.
 * A dump the runtime refuses at once fails the copy with that error, never as an unhandled
 * rejection while the copy waits for the dump's head.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Transform } from 'node:stream';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ACCOUNT_TRIES, seedFromLocalDump, seedFromPrimaryCopy } from '../../../agent/database/dump-seed.js';
import { q, withAdmin } from '../../../agent/mysql/admin.js';
import { configureReplica, replicaStatus } from '../../../agent/mysql/replication.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../../lib/logger.js';
import { until } from '../../helpers/lab.js';
import { localServers, type LocalServer, type LocalServers } from './local-servers.js';

const ADMIN = 'Admin.Pass_01';
const REPL = 'Repl.Pass_01';
const LINROOT = 'Linroot.Pass_01';
const ROWS = 300_000;

type Node = LocalServer;

describe('dump seeds against real servers', () => {
  let root: string;
  let rt: ContainerRuntime;
  let servers: LocalServers;
  let src: Node;
  const made: string[] = [];

  async function node(name: string, index: number): Promise<Node> {
    const n = await servers.start(name, index);
    if (!made.includes(name)) made.push(name);
    return n;
  }
  const sql = (n: Node, ...stmts: string[]) => withAdmin(n.admin, async (c) => {
    let last: any[] = [];
    for (const s of stmts) last = await q(c, s);
    return last;
  });
  /** The customer's accounts as the privilege tables hold them: who, with which password hash, which schema grants. */
  const accounts = (n: Node) => sql(n, `SELECT u.User, u.Host, JSON_VALUE(u.Priv, '$.authentication_string') AS pw,
      (SELECT GROUP_CONCAT(d.Db, ':', d.Select_priv ORDER BY d.Db) FROM mysql.db d WHERE d.User = u.User AND d.Host = u.Host) AS grants
    FROM mysql.global_priv u WHERE u.User NOT IN ('root', 'mariadb.sys', 'fulcrum_repl', 'linroot', '') ORDER BY u.User, u.Host`);
  /** The runtime the seed is handed: `before` runs each time it is about to start mariadb-dump. */
  const beforeDump = (before: () => Promise<void>): ContainerRuntime => {
    const w = Object.create(rt) as ContainerRuntime;
    w.exec = async (name, argv, io) => {
      if (argv[0] === 'mariadb-dump') await before();
      return rt.exec(name, argv, io);
    };
    return w;
  };
  const seedArgs = { adminPassword: ADMIN, allowList: ['127.0.0.0/8'], linrootPassword: LINROOT };
  const primary = () => ({ host: '127.0.0.1', port: src.port, password: REPL, caPem: servers.caPem });
  const wipe = async (t: Node) => {
    await rt.remove(t.name, { withData: true });
    return node(t.name, 2);
  };
  /** Replicates `t` from the source and waits until it has applied everything the source logged. */
  const replicate = async (t: Node) => {
    await withAdmin(t.admin, (c) => configureReplica(c, { primaryHost: '127.0.0.1', primaryPort: src.port, password: REPL }));
    const pos = String((await sql(src, 'SELECT @@gtid_binlog_pos AS p'))[0].p);
    await until('the target applied the source\'s position', async () => {
      const r = await withAdmin(t.admin, async (c) => ({ rs: await replicaStatus(c), waited: (await q(c, 'SELECT MASTER_GTID_WAIT(?, 1) AS w', [pos]))[0].w }));
      if (r.rs?.lastError) throw new Error(`replication stopped: ${r.rs.lastError}`);
      return Number(r.waited) === 0;
    }, 60_000, 100);
  };

  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'fulcrum-copyseed-'));
    rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
    servers = await localServers({ rt, root, adminPassword: ADMIN, replPassword: REPL });
    src = await node('fcopyseed-src', 1);
    await sql(src, 'SET GLOBAL read_only=OFF', 'CREATE DATABASE app', 'CREATE TABLE app.t (id INT PRIMARY KEY, pad VARCHAR(100) NOT NULL)',
      `INSERT INTO app.t SELECT seq, REPEAT(MD5(seq), 3) FROM app.seq_1_to_${ROWS}`,
      "CREATE USER 'early'@'%' IDENTIFIED BY 'Early.Pass_1'", "GRANT SELECT ON app.* TO 'early'@'%'",
      "CREATE USER 'gone'@'%' IDENTIFIED BY 'Gone.Pass_1'");
  }, 180_000);

  afterAll(async () => {
    for (const n of made) await rt?.remove(n, { withData: true }).catch(() => undefined);
    await rt?.close();
    if (root) rmSync(root, { recursive: true, force: true, maxRetries: 3 });
  });

  it('accounts created, changed and dropped between the account read and the snapshot are right on the member (copy over TLS), and later ones replicate', async () => {
    const t = await node('fcopyseed-t1', 2);
    let dumps = 0;
    const runtime = beforeDump(async () => {
      if (dumps++ > 0) return;
      await sql(src, "CREATE USER 'late'@'%' IDENTIFIED BY 'Late.Pass_1'", "GRANT SELECT ON app.* TO 'late'@'%'",
        "ALTER USER 'early'@'%' IDENTIFIED BY 'Early.Pass_2'", "DROP USER 'gone'@'%'");
    });
    const seed = await seedFromPrimaryCopy({ ...seedArgs, runtime, target: { name: t.name, admin: t.admin }, primary: primary() });
    expect(await accounts(t)).toEqual(await accounts(src));
    expect((await accounts(t)).map((a) => a.User)).toEqual(['early', 'late']);
    expect(seed.gtid).toBe(String((await sql(src, 'SELECT @@gtid_binlog_pos AS p'))[0].p));
    // The first dump was stopped: its snapshot came after account statements the read had not seen.
    expect(dumps).toBe(2);
    // Statements after the snapshot replicate: none meets an account the copy already had.
    await sql(src, "CREATE USER 'after'@'%' IDENTIFIED BY 'After.Pass_1'", "ALTER USER 'late'@'%' IDENTIFIED BY 'Late.Pass_2'", "DROP USER 'early'@'%'", 'INSERT INTO app.t VALUES (0, \'x\')');
    await replicate(t);
    expect(await accounts(t)).toEqual(await accounts(src));
    expect(Number((await sql(t, 'SELECT COUNT(*) AS n FROM app.t'))[0].n)).toBe(ROWS + 1);
    // The customer logs in on the member with the password of the copy's moment.
    const c = await mysql.createConnection({ host: '127.0.0.1', port: t.port, user: 'late', password: 'Late.Pass_2', ssl: { ca: servers.caPem } });
    expect((await c.query('SELECT COUNT(*) AS n FROM app.t'))[0]).toEqual([{ n: ROWS + 1 }]);
    await c.end();
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it('the one-host dump reads the accounts again too', async () => {
    const t = await node('fcopyseed-t2', 2);
    let dumps = 0;
    const runtime = beforeDump(async () => {
      if (dumps++ > 0) return;
      await sql(src, "CREATE USER 'local'@'%' IDENTIFIED BY 'Local.Pass_1'");
    });
    await seedFromLocalDump({ ...seedArgs, runtime, source: { name: src.name, admin: src.admin }, target: { name: t.name, admin: t.admin } });
    expect((await accounts(t)).map((a) => a.User)).toContain('local');
    expect(dumps).toBe(2);
    // Its DROP replicates: the member had the account the statement expects.
    await sql(src, "DROP USER 'local'@'%'");
    await replicate(t);
    expect(await accounts(t)).toEqual(await accounts(src));
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it(`accounts that change before every snapshot fail the copy after ${ACCOUNT_TRIES} tries, with nothing loaded`, async () => {
    const t = await node('fcopyseed-t3', 2);
    let dumps = 0;
    const runtime = beforeDump(async () => {
      dumps++;
      await sql(src, `ALTER USER 'late'@'%' IDENTIFIED BY 'Late.Pass_${dumps + 10}'`);
    });
    await expect(seedFromPrimaryCopy({ ...seedArgs, runtime, target: { name: t.name, admin: t.admin }, primary: primary() }))
      .rejects.toThrow(new RegExp(`accounts changed on the primary between the copy's reading of them and its snapshot, ${ACCOUNT_TRIES} times in a row \\(last at [^)]*bin\\.\\d+:\\d+\\)`));
    expect(dumps).toBe(ACCOUNT_TRIES);
    expect(await sql(t, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'app'")).toEqual([]);
    expect((await sql(t, 'SELECT @@gtid_slave_pos AS p'))[0].p).toBe('');
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it('a copy whose source is killed midway leaves the member without a position, and no copy is loaded over what it holds', async () => {
    let t = await node('fcopyseed-t4', 2);
    let sent = 0;
    let killed: Promise<void> | undefined;
    // The source's server is killed once about 2 MB of the dump went through.
    const runtime = Object.create(rt) as ContainerRuntime;
    runtime.exec = async (name, argv, io) => {
      if (argv[0] !== 'mariadb-dump' || !io?.stdout) return rt.exec(name, argv, io);
      const out = io.stdout;
      const tap = new Transform({
        transform(chunk: Buffer, _enc, done) {
          sent += chunk.length;
          if (sent > 2_000_000 && !killed) killed = rt.kill(src.name);
          done(null, chunk);
        },
      });
      tap.pipe(out);
      return rt.exec(name, argv, { ...io, stdout: tap });
    };
    await expect(seedFromPrimaryCopy({ ...seedArgs, runtime, target: { name: t.name, admin: t.admin }, primary: primary() }))
      .rejects.toThrow(/dumping the primary failed|loading the dump failed/);
    await killed;
    expect(sent).toBeGreaterThan(2_000_000);
    // Part of the table was loaded, and the member has no GTID position: it is never counted caught up.
    const part = Number((await sql(t, 'SELECT COUNT(*) AS n FROM app.t'))[0].n);
    expect(part).toBeLessThan(ROWS);
    expect(await sql(t, 'SELECT @@gtid_slave_pos AS s, @@gtid_current_pos AS c, @@gtid_binlog_pos AS b')).toEqual([{ s: '', c: '', b: '' }]);
    // The source back, a table dropped there meanwhile: a copy over the half-loaded member would
    // keep that table; it is refused until the member is wiped.
    await rt.start(src.name);
    await sql(src, 'SET GLOBAL read_only=OFF', 'CREATE TABLE app.dropped (id INT PRIMARY KEY)');
    await expect(seedFromPrimaryCopy({ ...seedArgs, runtime: rt, target: { name: t.name, admin: t.admin }, primary: primary() }))
      .rejects.toThrow(/already holds 1 schema\(s\), left by a copy that did not finish/);
    await sql(src, 'DROP TABLE app.dropped');
    t = await wipe(t);
    const seed = await seedFromPrimaryCopy({ ...seedArgs, runtime: rt, target: { name: t.name, admin: t.admin }, primary: primary() });
    expect(seed.outside).toEqual([]);
    expect(await sql(t, "SELECT TABLE_NAME AS n FROM information_schema.TABLES WHERE TABLE_SCHEMA = 'app' ORDER BY 1")).toEqual([{ n: 't' }]);
    await replicate(t);
    expect(await sql(t, 'SELECT COUNT(*) AS n, SUM(CRC32(pad)) AS c FROM app.t')).toEqual(await sql(src, 'SELECT COUNT(*) AS n, SUM(CRC32(pad)) AS c FROM app.t'));
    await rt.remove(t.name, { withData: true });
  }, 300_000);

  it('a copy whose source stops answering midway (a cut link: no FIN, no RST) fails once it sent nothing for the stall time', async () => {
    const t = await node('fcopyseed-t6', 2);
    const pid = Number((await rt.inspect(src.name)).ref);
    expect(pid).toBeGreaterThan(0);
    let sent = 0;
    let frozen = false;
    const runtime = Object.create(rt) as ContainerRuntime;
    runtime.exec = async (name, argv, io) => {
      if (argv[0] !== 'mariadb-dump' || !io?.stdout) return rt.exec(name, argv, io);
      const tap = new Transform({
        transform(chunk: Buffer, _enc, done) {
          sent += chunk.length;
          if (sent > 2_000_000 && !frozen) {
            frozen = true;
            process.kill(pid, 'SIGSTOP');
          }
          done(null, chunk);
        },
      });
      tap.pipe(io.stdout);
      return rt.exec(name, argv, { ...io, stdout: tap });
    };
    const started = Date.now();
    try {
      await expect(seedFromPrimaryCopy({ ...seedArgs, runtime, target: { name: t.name, admin: t.admin }, primary: primary(), stallMs: 3000 }))
        .rejects.toThrow(/dumping the primary failed: it sent nothing for 3 s while the member waited/);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    expect(frozen).toBe(true);
    expect(Date.now() - started).toBeLessThan(60_000);
    expect((await sql(t, 'SELECT @@gtid_slave_pos AS s'))[0].s).toBe('');
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it('a copy whose source stops answering before the dump has begun fails after the stall time too', async () => {
    const t = await node('fcopyseed-t7', 2);
    const pid = Number((await rt.inspect(src.name)).ref);
    const runtime = beforeDump(async () => {
      process.kill(pid, 'SIGSTOP');
    });
    try {
      await expect(seedFromPrimaryCopy({ ...seedArgs, runtime, target: { name: t.name, admin: t.admin }, primary: primary(), stallMs: 3000 }))
        .rejects.toThrow(/dumping the primary failed: it sent nothing for 3 s/);
    } finally {
      process.kill(pid, 'SIGCONT');
    }
    expect(await sql(t, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'app'")).toEqual([]);
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it('a dump that cannot start (the runtime has no node by that name) fails the copy with the runtime\'s error, never an unhandled rejection while the head is awaited', async () => {
    const t = await node('fcopyseed-t9', 2);
    // The runtime refuses the dump at once; the copy only awaits it after the head's wait. An
    // unhandled rejection meanwhile would end the agent (and fails this file's run).
    await expect(seedFromPrimaryCopy({ ...seedArgs, runtime: rt, target: { name: 'fcopyseed-missing', admin: t.admin }, primary: primary(), stallMs: 2000 }))
      .rejects.toThrow(/Not found/);
    expect(await sql(t, "SELECT SCHEMA_NAME FROM information_schema.SCHEMATA WHERE SCHEMA_NAME = 'app'")).toEqual([]);
    await rt.remove(t.name, { withData: true });
  }, 240_000);

  it('names the tables outside InnoDB, which the snapshot does not cover', async () => {
    await sql(src, 'CREATE TABLE app.m (id INT PRIMARY KEY) ENGINE=MyISAM', 'INSERT INTO app.m VALUES (1)');
    const t = await node('fcopyseed-t5', 2);
    const seed = await seedFromPrimaryCopy({ ...seedArgs, runtime: rt, target: { name: t.name, admin: t.admin }, primary: primary() });
    expect(seed.outside).toEqual(['app.m (MyISAM)']);
    await sql(src, 'DROP TABLE app.m');
    await rt.remove(t.name, { withData: true });
  }, 240_000);
});
