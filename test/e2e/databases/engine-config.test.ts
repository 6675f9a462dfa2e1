// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries, serverVersion, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, until, waitStatus, type DbLab, type RuntimeKind } from './db-lab.js';

/**
 * engine_config on real MariaDB servers run by a `fulcrum agent` process, on both runtimes (docs/databases.md,
 * "engine_config"): a 3-node database created with settings, then changed with a PUT that needs a
 * restart (rolled out replicas first) and one that does not (set live); every member shows the
 * values in SHOW VARIABLES and the database takes writes afterwards.
 */
describe.each([
  ['process', DEFAULT_SERIES],
  ['docker', DEFAULT_SERIES],
  // The newer series has its own variable set and defaults: every setting must reach it too.
  ['docker', '11.8'],
] as [RuntimeKind, string][])('engine_config applied to every member (%s runtime, MariaDB %s)', (runtime, SERIES) => {
  let lab: DbLab;
  let db: any;
  let password = '';
  let ca = '';
  const tag = SERIES === DEFAULT_SERIES ? '' : `-${SERIES.replace('.', '')}`;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  /** SHOW VARIABLES on each member, straight to the node (not through the front proxy). */
  const variables = async (names: string[]) => {
    const d = await ok('GET', `${MYSQL}/${db.id}`);
    const out: Record<string, Record<string, string>> = {};
    for (const address of Object.keys(d.members)) {
      // The node certificates name every node address, so TLS is verified to the node itself.
      const c = await mysql.createConnection({ host: address, port: 3306, user: 'linroot', password, connectTimeout: 3000, ssl: { ca, rejectUnauthorized: true } });
      try {
        const [rows] = await c.query(`SHOW GLOBAL VARIABLES WHERE Variable_name IN (${names.map(() => '?').join(',')})`, names);
        out[address] = Object.fromEntries((rows as any[]).map((r) => [r.Variable_name, String(r.Value)]));
      } finally {
        await c.end();
      }
    }
    return out;
  };
  /**
   * When each member's server started, by the server's own clock (now minus Uptime), in whole
   * seconds. A restart in place keeps a docker container's id, so the id cannot show one; this can.
   */
  const serverStarts = async () => {
    const d = await ok('GET', `${MYSQL}/${db.id}`);
    const out: Record<string, number> = {};
    for (const address of Object.keys(d.members)) {
      const c = await mysql.createConnection({ host: address, port: 3306, user: 'linroot', password, connectTimeout: 3000, ssl: { ca, rejectUnauthorized: true } });
      try {
        const [rows] = await c.query("SELECT UNIX_TIMESTAMP() - VARIABLE_VALUE AS started FROM information_schema.GLOBAL_STATUS WHERE VARIABLE_NAME = 'UPTIME'");
        out[address] = Number((rows as any[])[0].started);
      } finally {
        await c.end();
      }
    }
    return out;
  };
  const writeRow = async (id: number) => {
    const c = await connectFrom({ source: '127.0.0.2', host: db.hosts.primary, port: 3306, user: 'linroot', password, ca });
    try {
      await c.query('INSERT INTO app.t VALUES (?)', [id]);
      const [rows] = await c.query('SELECT COUNT(*) AS n FROM app.t');
      return Number((rows as any[])[0].n);
    } finally {
      await c.end();
    }
  };

  beforeAll(async () => {
    lab = await startDbLab(`engcfg-${runtime}${tag}`, runtime);
    await lab.startAgent();
    // The series named, never the first engine listed: a docker agent offers every image this machine built.
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, SERIES);
    const created = await ok('POST', MYSQL, {
      label: `engcfg-${runtime}${tag}`, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, allow_list: ['0.0.0.0/0'],
      engine_config: { binlog_retention_period: 900, mysql: { innodb_ft_min_token_size: 2, connect_timeout: 20 } },
    });
    db = await waitStatus(lab, created.id, 'active', 180_000);
    password = (await ok('GET', `${MYSQL}/${db.id}/credentials`)).password;
    ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    const c = await connectFrom({ source: '127.0.0.2', host: db.hosts.primary, port: 3306, user: 'linroot', password, ca });
    expect(db.version).toMatch(seriesPattern(SERIES));
    expect(await serverVersion(c)).toMatch(seriesPattern(SERIES));
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await c.end();
  }, 240_000);
  afterAll(async () => {
    await lab?.close();
  });

  it('creates the servers with the settings asked for, on every member', async () => {
    await until('create settings on every member', async () => {
      const v = await variables(['innodb_ft_min_token_size', 'connect_timeout']);
      return Object.keys(v).length === 3 && Object.values(v).every((x) => x.innodb_ft_min_token_size === '2' && x.connect_timeout === '20') ? v : undefined;
    }, 60_000, 500);
  });

  it('acceptance 3: a change that needs a restart is on every member afterwards and the database takes writes', async () => {
    expect(await writeRow(1)).toBe(1);
    const put = await ok('PUT', `${MYSQL}/${db.id}`, { engine_config: { mysql: { innodb_ft_min_token_size: 5, innodb_rollback_on_timeout: true } } });
    expect(put.status).toBe('updating');
    db = await waitStatus(lab, db.id, 'active', 150_000);
    const v = await variables(['innodb_ft_min_token_size', 'innodb_rollback_on_timeout', 'connect_timeout']);
    expect(Object.keys(v)).toHaveLength(3);
    for (const [address, x] of Object.entries(v)) {
      expect(x, address).toEqual({ innodb_ft_min_token_size: '5', innodb_rollback_on_timeout: 'ON', connect_timeout: '20' });
    }
    expect(Object.values(db.members).sort()).toEqual(['failover', 'failover', 'primary']);
    expect(await until('writable after the rolling restart', async () => writeRow(2).catch(() => undefined), 30_000, 500)).toBe(2);
    const events = (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.action === 'database_update' && e.entity?.id === db.id);
    expect(events[0]).toMatchObject({ status: 'finished' });
  });

  it('sets a change that needs no restart live on every member, and refuses an out-of-range value naming the key', async () => {
    const mine = async () => (await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`));
    const before = await mine();
    const startedBefore = await serverStarts();
    expect(Object.keys(startedBefore)).toHaveLength(3);
    await ok('PUT', `${MYSQL}/${db.id}`, { engine_config: { mysql: { wait_timeout: 300, sql_mode: 'ANSI_QUOTES,STRICT_ALL_TABLES', sql_require_primary_key: true } } });
    db = await waitStatus(lab, db.id, 'active', 120_000);
    const v = await variables(['wait_timeout', 'sql_mode', 'innodb_force_primary_key', 'innodb_ft_min_token_size']);
    for (const [address, x] of Object.entries(v)) {
      expect(x, address).toEqual({ wait_timeout: '300', sql_mode: 'ANSI_QUOTES,STRICT_ALL_TABLES', innodb_force_primary_key: 'ON', innodb_ft_min_token_size: '5' });
    }
    // Not restarted: the same server processes as before.
    expect(before).toHaveLength(3);
    expect((await mine()).map((n) => n.ref).sort()).toEqual(before.map((n) => n.ref).sort());
    // On docker a restart keeps the container id: each server's start time shows it on both
    // runtimes (one second either way for the clock ticking between the two reads).
    const startedAfter = await serverStarts();
    expect(Object.keys(startedAfter).sort()).toEqual(Object.keys(startedBefore).sort());
    for (const [address, t] of Object.entries(startedAfter)) expect(Math.abs(t - startedBefore[address]!), address).toBeLessThanOrEqual(1);
    expect(await writeRow(3)).toBe(3);

    const bad = await lab.api('PUT', `${MYSQL}/${db.id}`, { engine_config: { mysql: { innodb_ft_min_token_size: 99 } } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([{ field: 'engine_config.mysql.innodb_ft_min_token_size', reason: 'innodb_ft_min_token_size must be from 0 to 16' }]);
  });
});
