// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks, temp folders, containers named from its own agent).
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { assertCurrentDatabase } from '../../helpers/database-schema.js';
import { DEFAULT_SERIES, engineOfSeries, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, waitStatus, type DbLab, type RuntimeKind } from './db-lab.js';

/**
 * A plan change through PUT as linodego sends it (`{type}`), on real servers run by a `fulcrum
 * agent` process: `resizing` then `active`, the new memory and CPU limits on the docker container
 * (recorded in the node's spec on the process runtime), the buffer pool sized from the new plan,
 * the data kept (docs/databases.md, "Resize and upgrade").
 */
describe.each([
  ['process', DEFAULT_SERIES],
  ['docker', DEFAULT_SERIES],
  // The newer series sizes its buffer pool differently (innodb_buffer_pool_size_max in 11.8),
  // and a single node is cheap: the new plan's pool must take there too.
  ['docker', '11.8'],
] as [RuntimeKind, string][])('resize through PUT type (%s runtime, MariaDB %s)', (runtime, SERIES) => {
  let lab: DbLab;
  let db: any;
  const tag = SERIES === DEFAULT_SERIES ? '' : `-${SERIES.replace('.', '')}`;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const query = async (sql: string) => {
    const password = (await ok('GET', `${MYSQL}/${db.id}/credentials`)).password;
    const ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    const c = await connectFrom({ source: '127.0.0.2', host: db.hosts.primary, port: 3306, user: 'linroot', password, ca });
    try {
      const [rows] = await c.query(sql);
      return rows as any[];
    } finally {
      await c.end();
    }
  };

  beforeAll(async () => {
    lab = await startDbLab(`resize-${runtime}${tag}`, runtime);
    await lab.startAgent();
    // The series named, never the first engine listed: a docker agent offers every image this machine built.
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, SERIES);
    const created = await ok('POST', MYSQL, { label: `resize-${runtime}${tag}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'] });
    db = await waitStatus(lab, created.id, 'active', 120_000);
    expect(db.version).toMatch(seriesPattern(SERIES));
    expect(String((await query('SELECT VERSION() AS v'))[0].v)).toMatch(seriesPattern(SERIES));
    await query('CREATE DATABASE app');
    await query('CREATE TABLE app.t (id INT PRIMARY KEY)');
    await query('INSERT INTO app.t VALUES (1), (2)');
  }, 180_000);
  afterAll(async () => {
    await lab?.close();
  });

  it('shows resizing then active, applies the new limits and keeps the data', async () => {
    const put = await ok('PUT', `${MYSQL}/${db.id}`, { type: 'g6-standard-2' });
    expect(put).toMatchObject({ status: 'resizing', type: 'g6-standard-2', total_disk_size_gb: 80 });
    assertCurrentDatabase(put);
    db = await waitStatus(lab, db.id, 'active', 180_000);
    assertCurrentDatabase(db);
    const nodes = (await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`));
    expect(nodes).toHaveLength(1);
    expect(nodes[0]).toMatchObject({ memoryMb: 4096, cpus: 2, state: 'running' });
    if (runtime === 'docker') {
      const info = await new Docker({ socketPath: '/var/run/docker.sock' }).getContainer(nodes[0]!.name).inspect();
      expect(info.HostConfig.Memory).toBe(4096 * 1024 * 1024);
      // Two vCPUs, or every CPU of a smaller host.
      expect(info.HostConfig.NanoCpus).toBe(Math.min(2, (await new Docker({ socketPath: '/var/run/docker.sock' }).info()).NCPU) * 1e9);
    }
    // `active` means served: the first connection after it gets its answer (docs/databases.md,
    // "When a database is active").
    const rows = await query('SELECT @@innodb_buffer_pool_size AS b, COUNT(*) AS n FROM app.t');
    expect(rows[0]).toEqual({ b: 4096 / 8 * 1024 * 1024, n: 2 });
    const events = (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.action === 'database_resize' && e.entity?.id === db.id);
    expect(events[0]).toMatchObject({ status: 'finished' });
  });
});
