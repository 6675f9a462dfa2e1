// Serial e2e lane (no marker) though it would be safe beside others (startDbLab: port 0, its own 127.76/78/79 blocks, temp folders, containers named from its own agent):
// about a minute, moved out of the concurrent lane to even out the two lanes' lengths (docs/testing.md).
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { serversUnder } from '../../helpers/db-servers.js';
import { DEFAULT_SERIES, engineOfSeries, serverVersion, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, dirEntries, listening, refusal, startDbLab, until, waitStatus, type DbLab, type RuntimeKind } from './db-lab.js';

/**
 * Issue 7 acceptance 1-5 through the API, with mysql2 as the client, against real MariaDB
 * servers run by a `fulcrum agent` process, for both runtimes (the docker one needs a running
 * dockerd and the locally built image: scripts/start-dockerd.sh, scripts/build-mysql-image.sh).
 */
describe.each(['process', 'docker'] as RuntimeKind[])('Managed MySQL provisioning through the API (%s runtime)', (runtime) => {
  let lab: DbLab;
  const SERIES = DEFAULT_SERIES;
  let engine: string;
  let one: any; // 1-node database
  let three: any; // 3-node semi_synch database
  const timings: Record<string, number> = {};

  beforeAll(async () => {
    lab = await startDbLab(`prov-${runtime}`, runtime);
    await lab.startAgent();
    // MariaDB 10.11 from this agent's own catalogue (a binary or an image), named rather than
    // the first listed: a docker agent offers every image this machine built.
    const agents = (await lab.api('GET', '/v4/fulcrum/agents')).body.data;
    engine = engineOfSeries(agents[0]?.engines ?? [], SERIES);
  });
  afterAll(async () => {
    console.log(`provisioning timings, ${runtime} runtime (s):`, JSON.stringify(timings));
    await lab?.close();
  });

  /** A 200 answer's body; anything else fails with the answer in the message. */
  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const creds = async (id: number) => (await lab.api('GET', `${MYSQL}/${id}/credentials`)).body as { username: string; password: string };
  const ca = async (id: number) => Buffer.from((await lab.api('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate, 'base64').toString('utf8');

  it('acceptance 5: bad requests get 400 naming the field; update while provisioning is refused', async () => {
    const valid = { label: 'bad-db', region: 'us-east', type: 'g6-nanode-1', engine };
    for (const [body, field] of [
      [{ ...valid, engine: 'mysql/1.0.0' }, 'engine'],
      [{ ...valid, cluster_size: 2 }, 'cluster_size'],
      [{ ...valid, cluster_size: 3, replication_type: 'none' }, 'replication_type'],
      [{ ...valid, label: 'ab' }, 'label'],
      [{ ...valid, label: 'x'.repeat(33) }, 'label'],
      [{ ...valid, allow_list: ['127.0.0.1/40'] }, 'allow_list[0]'],
    ] as [Record<string, unknown>, string][]) {
      const r = await lab.api('POST', MYSQL, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors.map((e: any) => e.field), JSON.stringify(body)).toContain(field);
    }
    const t0 = Date.now();
    const created = await lab.api('POST', MYSQL, { label: 'db-one', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['127.0.0.2/32'] });
    expect(created.status).toBe(200);
    one = created.body;
    expect(one.status).toBe('provisioning');
    const put = await lab.api('PUT', `${MYSQL}/${one.id}`, { label: 'db-renamed' });
    expect(put.status).toBe(400);
    expect(put.body.errors[0].reason).toMatch(/provisioning/);
    one = await waitStatus(lab, one.id, 'active', 60_000);
    timings.oneNodeActive = (Date.now() - t0) / 1000;
  });

  it('acceptance 1 (1 node): TLS verified against /ssl, writes, and plain TCP is refused', async () => {
    expect(one.hosts.primary).toMatch(/^127\.78\.\d+\.\d+$/);
    expect(one.port).toBe(3306);
    expect(one.ssl_connection).toBe(true);
    expect(Object.values(one.members)).toEqual(['primary']);
    const { username, password } = await creds(one.id);
    expect(username).toBe('linroot');
    const pem = await ca(one.id);
    expect(pem).toMatch(/-----BEGIN CERTIFICATE-----/);
    const c = await connectFrom({ source: '127.0.0.2', host: one.hosts.primary, port: one.port, user: username, password, ca: pem });
    // The series asked for is what runs.
    expect(one.version).toMatch(seriesPattern(SERIES));
    expect(await serverVersion(c)).toMatch(seriesPattern(SERIES));
    await c.query('CREATE DATABASE IF NOT EXISTS app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))');
    await c.query("INSERT INTO app.t VALUES (1, 'one')");
    const [cipher] = await c.query("SHOW STATUS LIKE 'Ssl_cipher'");
    expect((cipher as any[])[0].Value).not.toBe('');
    await c.end();
    const plain = await refusal({ source: '127.0.0.2', host: one.hosts.primary, port: one.port, user: username, password });
    // Refused for want of TLS (require_secure_transport), not for a login the same client passed with TLS.
    expect(String(plain)).toMatch(/insecure transport/i);
    const ev = (await lab.api('GET', '/v4/account/events')).body.data.find((e: any) => e.action === 'database_create' && e.entity.id === one.id);
    expect(ev, JSON.stringify(ev)).toMatchObject({ status: 'finished', percent_complete: 100 });
  });

  it('acceptance 2: allow_list by source address, changed within 5 s; [] refuses both', async () => {
    const { password } = await creds(one.id);
    const pem = await ca(one.id);
    const from = (source: string) => refusal({ source, host: one.hosts.primary, port: 3306, user: 'linroot', password, ca: pem });
    expect(await from('127.0.0.2')).toBeNull();
    // Outside the allow_list the data plane resets the connection before the server sees it.
    expect(String(await from('127.0.0.3'))).toMatch(/ECONNRESET/);
    const t0 = Date.now();
    await ok('PUT', `${MYSQL}/${one.id}`, { allow_list: ['127.0.0.3/32'] });
    await until('127.0.0.3 allowed', async () => (await from('127.0.0.3')) === null || undefined, 5_000, 100);
    await until('127.0.0.2 refused', async () => /ECONNRESET/.test(String(await from('127.0.0.2'))) || undefined, 5_000, 100);
    timings.allowListApplied = (Date.now() - t0) / 1000;
    expect(timings.allowListApplied).toBeLessThan(5);
    await waitStatus(lab, one.id, 'active', 10_000);
    // The agent may report convergence a moment before its proxy swapped the list (reported to
    // the agent side), so each change is awaited by its effect, within the 5 s of the acceptance.
    await ok('PUT', `${MYSQL}/${one.id}`, { allow_list: [] });
    await until('[] refuses 127.0.0.3', async () => /ECONNRESET/.test(String(await from('127.0.0.3'))) || undefined, 5_000, 100);
    expect(String(await from('127.0.0.2'))).toMatch(/ECONNRESET/);
    await waitStatus(lab, one.id, 'active', 10_000);
    await ok('PUT', `${MYSQL}/${one.id}`, { allow_list: ['0.0.0.0/0'] });
    await until('0.0.0.0/0 allows 127.0.0.4', async () => (await from('127.0.0.4')) === null || undefined, 5_000, 100);
    await waitStatus(lab, one.id, 'active', 10_000);
  });

  it('acceptance 3: /credentials/reset changes the password (old fails, new works)', async () => {
    const old = (await creds(one.id)).password;
    const pem = await ca(one.id);
    expect((await lab.api('POST', `${MYSQL}/${one.id}/credentials/reset`)).body).toEqual({});
    const fresh = await until('new password', async () => {
      const p = (await creds(one.id)).password;
      return p !== old ? p : undefined;
    }, 20_000);
    const conn = { source: '127.0.0.5', host: one.hosts.primary, port: 3306, user: 'linroot', ca: pem };
    expect(String(await refusal({ ...conn, password: old }))).toMatch(/Access denied/);
    const c = await connectFrom({ ...conn, password: fresh });
    const [rows] = await c.query('SELECT v FROM app.t WHERE id = 1');
    expect((rows as any[])[0].v).toBe('one');
    await c.end();
  });

  it('acceptance 1 (3 nodes, semi_synch): writes on primary are readable on secondary within 1 s', async () => {
    const t0 = Date.now();
    const created = await lab.api('POST', MYSQL, { label: 'db-three', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, replication_type: 'semi_synch', allow_list: ['0.0.0.0/0'] });
    expect(created.status).toBe(200);
    three = await waitStatus(lab, created.body.id, 'active', 120_000);
    timings.threeNodeActive = (Date.now() - t0) / 1000;
    expect(three.hosts.secondary).toMatch(/^127\.78\.\d+\.\d+$/);
    expect(Object.values(three.members).sort()).toEqual(['failover', 'failover', 'primary']);
    const { password } = await creds(three.id);
    const pem = await ca(three.id);
    const p = await connectFrom({ source: '127.0.0.2', host: three.hosts.primary, port: 3306, user: 'linroot', password, ca: pem });
    const [semi] = await p.query("SHOW STATUS LIKE 'Rpl_semi_sync_master_status'");
    expect((semi as any[])[0]?.Value).toBe('ON');
    await p.query('CREATE DATABASE IF NOT EXISTS app');
    await p.query('CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))');
    const s = await connectFrom({ source: '127.0.0.2', host: three.hosts.secondary, port: 3306, user: 'linroot', password, ca: pem });
    const [ro] = await s.query('SELECT @@read_only AS ro');
    expect((ro as any[])[0].ro).toBe(1);
    const t1 = Date.now();
    await p.query("INSERT INTO app.t VALUES (42, 'replicated')");
    await until('row on secondary', async () => {
      const [rows] = await s.query('SELECT v FROM app.t WHERE id = 42').catch(() => [[]]);
      return (rows as any[])[0]?.v === 'replicated' || undefined;
    }, 1_000, 20);
    timings.replicaVisible = (Date.now() - t1) / 1000;
    const plain = await refusal({ source: '127.0.0.2', host: three.hosts.primary, port: 3306, user: 'linroot', password });
    expect(String(plain)).toMatch(/insecure transport/i);
    await p.end();
    await s.end();
  });

  it('resize: a larger plan restarts the nodes with its limits, resizing -> active, data kept', async () => {
    const small = (await lab.api('PUT', `${MYSQL}/${three.id}`, { type: 'g6-nanode-1' }));
    expect(small.status).toBe(200); // same plan: nothing to do
    const r = await ok('PUT', `${MYSQL}/${three.id}`, { type: 'g6-standard-1' });
    expect(r).toMatchObject({ status: 'resizing', type: 'g6-standard-1' });
    const t0 = Date.now();
    await waitStatus(lab, three.id, 'active', 120_000);
    timings.resize3 = (Date.now() - t0) / 1000;
    const { password } = await creds(three.id);
    const pem = await ca(three.id);
    for (const host of [three.hosts.primary, three.hosts.secondary]) {
      const c = await connectFrom({ source: '127.0.0.2', host, port: 3306, user: 'linroot', password, ca: pem });
      const [rows] = await c.query('SELECT @@innodb_buffer_pool_size AS b, (SELECT v FROM app.t WHERE id = 42) AS v');
      expect((rows as any[])[0]).toEqual({ b: 2048 / 8 * 1024 * 1024, v: 'replicated' });
      await c.end();
    }
    const down = await lab.api('PUT', `${MYSQL}/${three.id}`, { type: 'g6-nanode-1' });
    expect(down.status).toBe(400);
    expect(down.body.errors[0].field).toBe('type');
  });

  it('ssl_connection false accepts plain connections; encrypted turns on encryption at rest', async () => {
    const created = await ok('POST', MYSQL, { label: 'db-plain', region: 'us-east', type: 'g6-nanode-1', engine, ssl_connection: false, encrypted: true, allow_list: ['0.0.0.0/0'] });
    expect(created).toMatchObject({ ssl_connection: false, encrypted: true });
    const d = await waitStatus(lab, created.id, 'active', 60_000);
    const { password } = await creds(d.id);
    const c = await connectFrom({ source: '127.0.0.2', host: d.hosts.primary, port: 3306, user: 'linroot', password });
    const [rows] = await c.query('SELECT @@require_secure_transport AS tls, @@innodb_encrypt_tables AS enc');
    expect((rows as any[])[0]).toEqual({ tls: 0, enc: 'ON' });
    await c.end();
    expect(await ok('DELETE', `${MYSQL}/${d.id}`)).toEqual({});
    await until('plain db removed', async () => !(await lab.nodes()).some((n) => n.name.includes(`-db${d.id}-`)) || undefined, 30_000, 200);
  });

  it('acceptance 4: killing and restarting the agent leaves databases running, reconciled, without duplicates', async () => {
    const before = await lab.nodes();
    expect(before.filter((n) => n.state === 'running')).toHaveLength(4);
    await lab.killAgent();
    await until('agent marked disconnected', async () => (await lab.api('GET', '/v4/fulcrum/agents')).body.data.every((a: any) => !a.connected) || undefined, 30_000);
    // Static stability: the databases keep serving without their agent.
    const { password } = await creds(one.id);
    const c1 = await connectFrom({ source: '127.0.0.2', host: one.hosts.primary, port: 3306, user: 'linroot', password, ca: await ca(one.id) }).catch((e) => e);
    // The endpoint lives on the data plane (docs/databases.md, "Database endpoints"), so it
    // answers while the agent is down.
    expect(c1).not.toBeInstanceOf(Error);
    await c1.end();
    await lab.startAgent();
    await waitStatus(lab, one.id, 'active', 30_000);
    await waitStatus(lab, three.id, 'active', 30_000);
    const after = await lab.nodes();
    expect(after.map((n) => `${n.name}:${n.ref}`).sort()).toEqual(before.map((n) => `${n.name}:${n.ref}`).sort());
    const c = await connectFrom({ source: '127.0.0.2', host: one.hosts.primary, port: 3306, user: 'linroot', password, ca: await ca(one.id) });
    const [rows] = await c.query('SELECT COUNT(*) AS n FROM app.t');
    expect((rows as any[])[0].n).toBe(1);
    await c.end();
  });

  it('acceptance 4: deleting databases leaves no process, listener or data directory', async () => {
    const pids = (await lab.nodes()).map((n) => n.ref);
    for (const d of [one, three]) expect((await lab.api('DELETE', `${MYSQL}/${d.id}`)).body).toEqual({});
    expect((await lab.api('GET', `${MYSQL}/${one.id}`)).status).toBe(404);
    await until('nodes removed', async () => (await lab.nodes()).length === 0 || undefined, 60_000, 200);
    if (runtime === 'process') for (const pid of pids) await until(`process ${pid} gone`, () => !dirEntries('/proc').includes(pid) || undefined, 10_000);
    else {
      const containers = execFileSync('docker', ['ps', '-aq', '--no-trunc']).toString();
      for (const id of pids) expect(containers).not.toContain(id);
    }
    for (const ip of [one.hosts.primary, three.hosts.primary, three.hosts.secondary]) {
      await until(`${ip}:3306 closed`, async () => !(await listening(ip, 3306)) || undefined, 10_000);
    }
    await until('data directories gone', () => dirEntries(join(lab.agentDir, 'databases')).length === 0 || undefined, 10_000);
    // Servers only: a client tool the agent ran on a node (the binlog archive's) names its socket too.
    expect(serversUnder(lab.agentDir)).toEqual([]);
    await until('addresses released', () => (lab.cp.context.db!.prepare("SELECT COUNT(*) FROM addresses WHERE owner_type = 'database'").pluck().get() as number) === 0 || undefined, 20_000);
  });
});
