// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks, temp folders, containers named from its own agent).
import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, writeFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries, serverVersion, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, startWriter, until, waitStatus, type DbLab, type RuntimeKind } from './db-lab.js';

/**
 * Issue 8 acceptance 1, 2, 3, 5 (patch now) and 6 through the API, with mysql2, against real
 * MariaDB servers run by a `fulcrum agent` process, for both runtimes.
 */
describe.each(['process', 'docker'] as RuntimeKind[])('Managed MySQL day two through the API (%s runtime)', (runtime) => {
  let lab: DbLab;
  let one: any;
  let three: any;
  const SERIES = DEFAULT_SERIES;
  const figures: Record<string, unknown> = {};

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const access = async (d: any) => ({
    password: (await ok('GET', `${MYSQL}/${d.id}/credentials`)).password as string,
    ca: Buffer.from((await ok('GET', `${MYSQL}/${d.id}/ssl`)).ca_certificate, 'base64').toString('utf8'),
  });
  const conn = async (d: any, host = d.hosts.primary) => {
    const a = await access(d);
    return connectFrom({ source: '127.0.0.2', host, port: 3306, user: 'linroot', password: a.password, ca: a.ca });
  };
  const ids = async (d: any, host?: string) => {
    const c = await conn(d, host);
    try {
      const [rows] = await c.query('SELECT id FROM app.t ORDER BY id');
      return (rows as any[]).map((r) => r.id as number);
    } finally {
      await c.end();
    }
  };
  const backups = async (d: any) => (await ok('GET', `${MYSQL}/${d.id}/backups`)).data as any[];
  const snapshot = async (d: any, label: string) => {
    await ok('POST', `${MYSQL}/${d.id}/backups`, { label });
    await waitStatus(lab, d.id, 'active', 60_000);
    return until(`snapshot ${label} listed`, async () => (await backups(d)).find((b) => b.label === label), 30_000, 200);
  };
  const lastEvent = async (d: any, action: string) =>
    (await ok('GET', '/v4/account/events')).data.find((e: any) => e.action === action && e.entity?.id === d.id);

  beforeAll(async () => {
    lab = await startDbLab(`day2-${runtime}`, runtime);
    await lab.startAgent();
    // MariaDB 10.11, named: a docker agent offers every image this machine built.
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, SERIES);
    const base = { region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'] };
    const a = await ok('POST', MYSQL, { ...base, label: 'day2-one' });
    const b = await ok('POST', MYSQL, { ...base, label: 'day2-three', cluster_size: 3, replication_type: 'semi_synch' });
    one = await waitStatus(lab, a.id, 'active', 90_000);
    three = await waitStatus(lab, b.id, 'active', 120_000);
    for (const d of [one, three]) {
      const c = await conn(d);
      expect(d.version).toMatch(seriesPattern(SERIES));
      expect(await serverVersion(c)).toMatch(seriesPattern(SERIES));
      await c.query('CREATE DATABASE app');
      await c.query("CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))");
      await c.query("INSERT INTO app.t VALUES (1, 'a'), (2, 'b'), (3, 'c')");
      await c.end();
    }
  });
  afterAll(async () => {
    console.log(`day-two figures, ${runtime} runtime:`, JSON.stringify(figures));
    await lab?.close();
  });

  it('acceptance 1: snapshot then restore brings back the snapshot rows, on 1 and 3 nodes, replicas agreeing', async () => {
    for (const d of [one, three]) {
      const b = await snapshot(d, 'before_rows');
      expect(b.type).toBe('snapshot');
      const c = await conn(d);
      await c.query("INSERT INTO app.t VALUES (4, 'after'), (5, 'after')");
      await c.end();
      expect(await ids(d)).toEqual([1, 2, 3, 4, 5]);
      const t0 = Date.now();
      expect(await ok('POST', `${MYSQL}/${d.id}/backups/${b.id}/restore`)).toEqual({});
      await until('restore finished', async () => (await lastEvent(d, 'database_backup_restore'))?.status === 'finished' || undefined, 90_000, 200);
      await waitStatus(lab, d.id, 'active', 60_000);
      figures[`restoreSeconds${d.cluster_size}`] = (Date.now() - t0) / 1000;
      expect(await ids(d)).toEqual([1, 2, 3]);
      const after = await ok('GET', `${MYSQL}/${d.id}`);
      expect(after.hosts).toEqual(d.hosts);
      expect(after.port).toBe(3306);
    }
    // The replicas agree with the primary: every node behind hosts.secondary has the same rows.
    const nodes = (await lab.nodes()).filter((n) => n.name.includes(`-db${three.id}-`));
    expect(nodes).toHaveLength(3);
    await until('replicas agree', async () => {
      const seen = await Promise.all(Array.from({ length: 6 }, () => ids(three, three.hosts.secondary).then((x) => x.join(','))));
      return seen.every((x) => x === '1,2,3') || undefined;
    }, 30_000, 300);
    const c = await conn(three);
    await c.query("INSERT INTO app.t VALUES (6, 'post')");
    await c.end();
    await until('replication runs after restore', async () => (await ids(three, three.hosts.secondary)).includes(6) || undefined, 10_000, 100);
  });

  it('acceptance 2: a corrupted backup is refused by restore with a clear error and the data stays', async () => {
    const b = await snapshot(one, 'to_corrupt');
    const dir = join(lab.agentDir, 'backups', String(one.id), String(b.id));
    const data = readdirSync(dir).filter((f) => f !== 'manifest.json').sort((x, y) => statSync(join(dir, y)).size - statSync(join(dir, x)).size)[0]!;
    const bytes = readFileSync(join(dir, data));
    bytes[Math.floor(bytes.length / 2)] ^= 0xff;
    writeFileSync(join(dir, data), bytes);
    const c = await conn(one);
    await c.query("INSERT INTO app.t VALUES (7, 'keep')");
    await c.end();
    expect(await ok('POST', `${MYSQL}/${one.id}/backups/${b.id}/restore`)).toEqual({});
    const ev = await until('restore failed', async () => {
      const e = await lastEvent(one, 'database_backup_restore');
      return e?.status === 'failed' ? e : undefined;
    }, 60_000, 200);
    expect(ev.message).toMatch(/checksum|corrupt/i);
    await waitStatus(lab, one.id, 'active', 30_000);
    expect(await ids(one)).toEqual([1, 2, 3, 7]);
    expect(await ok('DELETE', `${MYSQL}/${one.id}/backups/${b.id}`)).toEqual({});
  });

  it('acceptance 3: a 4th snapshot gets 400, deleting one makes room, bad labels get 400 naming the field', async () => {
    await until('one snapshot left', async () => (await backups(one)).length === 1 || undefined, 20_000, 200);
    for (const body of [{ label: '' }, { label: 'x'.repeat(31) }, { label: 'no-dashes' }, { label: 'before_rows' }]) {
      const r = await lab.api('POST', `${MYSQL}/${one.id}/backups`, body);
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(r.body.errors[0].field).toBe('label');
    }
    await snapshot(one, 'second');
    await snapshot(one, 'third');
    const fourth = await lab.api('POST', `${MYSQL}/${one.id}/backups`, { label: 'fourth' });
    expect(fourth.status).toBe(400);
    expect(fourth.body.errors[0].reason).toMatch(/3 snapshots/);
    const second = (await backups(one)).find((b) => b.label === 'second');
    expect(await ok('DELETE', `${MYSQL}/${one.id}/backups/${second.id}`)).toEqual({});
    await snapshot(one, 'fourth');
    expect((await backups(one)).map((b) => b.label).sort()).toEqual(['before_rows', 'fourth', 'third']);
    const filtered = await lab.api('GET', `${MYSQL}/${one.id}/backups`);
    expect(filtered.body.results).toBe(3);
  });

  it('suspend stops the nodes keeping the data; resume brings them back', async () => {
    expect(await ok('POST', `${MYSQL}/${one.id}/suspend`)).toEqual({});
    await waitStatus(lab, one.id, 'suspended', 60_000);
    const nodes = (await lab.nodes()).filter((n) => n.name.includes(`-db${one.id}-`));
    expect(nodes.map((n) => n.state)).toEqual(['stopped']);
    const a = await access(one);
    // Refused by the data plane once its wait for a serving member is over (3 s), not by the
    // client's own connect timeout, which is longer here: that one would come on any fault.
    const refused = await connectFrom({ source: '127.0.0.2', host: one.hosts.primary, port: 3306, user: 'linroot', password: a.password, ca: a.ca, timeoutMs: 15_000 }).then((c) => c.end().then(() => null), (e: Error) => e);
    expect(String(refused)).toMatch(/ECONNRESET|Connection lost: The server closed the connection/);
    const whileSuspended = await lab.api('POST', `${MYSQL}/${one.id}/backups`, { label: 'while_suspended' });
    expect({ status: whileSuspended.status, body: whileSuspended.body }).toEqual({ status: 400, body: { errors: [{ reason: 'Your database is suspended; it can be backed up only when it is active.' }] } });
    expect(await ok('POST', `${MYSQL}/${one.id}/resume`)).toEqual({});
    await waitStatus(lab, one.id, 'active', 60_000);
    expect(await ids(one)).toEqual([1, 2, 3, 7]);
  });

  it('acceptance 5: a 3-node patch under 20 writes/s loses no committed row and no outage lasts 5 s', async () => {
    const a = await access(three);
    const w = startWriter({ host: three.hosts.primary, password: a.password, ca: a.ca, table: 'app.t' });
    await until('writer running', () => w.acked.length >= 20 || undefined, 10_000);
    const t0 = Date.now();
    expect(await ok('POST', `${MYSQL}/${three.id}/patch`)).toEqual({});
    await waitStatus(lab, three.id, 'updating', 5_000).catch(() => undefined);
    await until('patch finished', async () => (await lastEvent(three, 'database_update'))?.status === 'finished' || undefined, 120_000, 200);
    await waitStatus(lab, three.id, 'active', 60_000);
    figures.patch3Seconds = (Date.now() - t0) / 1000;
    const n = w.acked.length;
    await until('writes continue after the patch', () => w.acked.length >= n + 20 || undefined, 10_000);
    await w.stop();
    figures.patch3LongestOutageMs = w.longestOutageMs;
    figures.patch3Errors = w.errors.length;
    // On failure: what the writes met, and what the agent did meanwhile.
    expect(w.longestOutageMs, `${JSON.stringify(w.errors.slice(-12))}\n${lab.output().split('\n').filter((l) => l.includes(`"database":${three.id},`)).slice(-40).join('\n')}`).toBeLessThan(5_000);
    const present = new Set(await ids(three));
    expect(w.acked.filter((id) => !present.has(id))).toEqual([]);
  });

  it('acceptance 5: a 1-node patch shows the downtime and then writes resume', async () => {
    const a = await access(one);
    const w = startWriter({ host: one.hosts.primary, password: a.password, ca: a.ca, table: 'app.t' });
    await until('writer running', () => w.acked.length >= 10 || undefined, 10_000);
    expect(await ok('POST', `${MYSQL}/${one.id}/patch`)).toEqual({});
    await until('patch finished', async () => (await lastEvent(one, 'database_update'))?.status === 'finished' || undefined, 120_000, 200);
    await waitStatus(lab, one.id, 'active', 60_000);
    const n = w.acked.length;
    await until('writes resume', () => w.acked.length >= n + 10 || undefined, 15_000);
    await w.stop();
    figures.patch1Errors = w.errors.length;
    figures.patch1LongestOutageMs = w.longestOutageMs;
    expect(w.errors.length).toBeGreaterThan(0);
    const present = new Set(await ids(one));
    expect(w.acked.filter((id) => !present.has(id))).toEqual([]);
  });

  it('acceptance 6: killing the primary of a 3-node cluster: writes resume within 15 s, nothing acknowledged lost, degraded then active', async () => {
    const before = await ok('GET', `${MYSQL}/${three.id}`);
    const primaryAddr = Object.entries(before.members).find(([, role]) => role === 'primary')![0];
    const node = (await lab.nodes()).find((n) => n.host === primaryAddr && n.name.includes(`-db${three.id}-`));
    expect(node, `node of ${primaryAddr}`).toBeDefined();
    const a = await access(three);
    const w = startWriter({ host: three.hosts.primary, password: a.password, ca: a.ca, table: 'app.t' });
    await until('writer running', () => w.acked.length >= 20 || undefined, 10_000);
    const statuses: string[] = [];
    let watching = true;
    const watcher = (async () => {
      while (watching) {
        const s = (await lab.api('GET', `${MYSQL}/${three.id}`)).body.status;
        if (statuses[statuses.length - 1] !== s) statuses.push(s);
        await new Promise((r) => setTimeout(r, 100));
      }
    })();
    const killedAt = Date.now();
    if (runtime === 'process') process.kill(Number(node!.ref), 'SIGKILL');
    else execFileSync('docker', ['kill', node!.ref]);
    const ackedAtKill = w.acked.length;
    await until('writes succeed again', () => (w.acked.length > ackedAtKill + 5 && !w.failing) || undefined, 15_000, 50);
    figures.failoverWritesBackSeconds = (Date.now() - killedAt) / 1000;
    await until('degraded seen', () => statuses.includes('degraded') || undefined, 30_000);
    await until('active again', () => (statuses.indexOf('degraded') < statuses.lastIndexOf('active') && statuses[statuses.length - 1] === 'active') || undefined, 120_000, 200);
    watching = false;
    await watcher;
    await w.stop();
    figures.failoverStatuses = statuses;
    figures.failoverLongestOutageMs = w.longestOutageMs;
    expect(w.longestOutageMs).toBeLessThan(15_000);
    expect(statuses.slice(statuses.indexOf('degraded'))).not.toContain('failed');
    const present = new Set(await ids(three));
    expect(w.acked.filter((id) => !present.has(id))).toEqual([]);
    const after = await ok('GET', `${MYSQL}/${three.id}`);
    expect(Object.values(after.members).sort()).toEqual(['failover', 'failover', 'primary']);
    expect(after.members[primaryAddr]).toBe('failover');
    const events = (await ok('GET', '/v4/account/events')).data.filter((e: any) => e.entity?.id === three.id).map((e: any) => e.action);
    expect(events).toContain('database_degraded');
    expect(events).toContain('database_failover');
  });
});
