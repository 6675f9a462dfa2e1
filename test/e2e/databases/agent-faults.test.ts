// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries, serverVersion, seriesPattern } from '../../helpers/engines.js';
import { MYSQL, connectFrom, refusal, startDbLab, until, waitStatus, type DbLab } from './db-lab.js';

/**
 * Small things seen under faults, through the API against real MariaDB servers run by a
 * `fulcrum agent` process that is SIGKILLed: one event per snapshot, no partial dump left in
 * backup storage after a kill mid-snapshot, and a status that says what a client of
 * hosts.primary sees while the agent starts again.
 */
describe('Managed MySQL under agent faults (process runtime)', () => {
  let lab: DbLab;
  let db: any;
  let access: { password: string; ca: string };

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const conn = () => connectFrom({ source: '127.0.0.2', host: db.hosts.primary, port: 3306, user: 'linroot', password: access.password, ca: access.ca });
  const backupDir = () => join(lab.agentDir, 'backups', String(db.id));
  const unfinished = () => (existsSync(backupDir()) ? readdirSync(backupDir()) : [])
    .filter((n) => !existsSync(join(backupDir(), n, 'manifest.json')) && readdirSync(join(backupDir(), n)).some((f) => f.startsWith('dump')));
  const snapshotEvents = async () =>
    ((await ok('GET', '/v4/account/events')).data as any[]).filter((e) => e.action === 'database_backup_create' && e.entity?.id === db.id);

  beforeAll(async () => {
    lab = await startDbLab('apf-faults', 'process');
    await lab.startAgent();
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, DEFAULT_SERIES);
    const made = await ok('POST', MYSQL, { region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'], label: 'apf-faults' });
    db = await waitStatus(lab, made.id, 'active', 90_000);
    access = {
      password: (await ok('GET', `${MYSQL}/${db.id}/credentials`)).password,
      ca: Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8'),
    };
    const c = await conn();
    expect(db.version).toMatch(seriesPattern(DEFAULT_SERIES));
    expect(await serverVersion(c)).toMatch(seriesPattern(DEFAULT_SERIES));
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, v VARCHAR(20))');
    await c.query("INSERT INTO app.t VALUES (1, 'a')");
    await c.end();
  });
  afterAll(async () => {
    await lab?.close();
  });

  it('a snapshot through the API records exactly one finished database_backup_create event', async () => {
    for (const label of ['first_snap', 'second_snap']) {
      await ok('POST', `${MYSQL}/${db.id}/backups`, { label });
      await waitStatus(lab, db.id, 'active', 60_000);
      await until(`${label} listed`, async () => ((await ok('GET', `${MYSQL}/${db.id}/backups`)).data as any[]).some((b) => b.label === label) || undefined, 30_000, 200);
    }
    // The second snapshot's result came after every report about the first: an agent echo of
    // the first would be recorded by now.
    const events = await snapshotEvents();
    expect(events.map((e) => [e.status, e.message])).toEqual([['finished', 'Snapshot second_snap'], ['finished', 'Snapshot first_snap']]);
    for (const label of ['first_snap', 'second_snap']) {
      const b = ((await ok('GET', `${MYSQL}/${db.id}/backups`)).data as any[]).find((x) => x.label === label);
      expect(await ok('DELETE', `${MYSQL}/${db.id}/backups/${b.id}`)).toEqual({});
    }
  });

  it('a dump left half-written by a SIGKILL during a snapshot is removed when the agent starts again', async () => {
    // About 20 MB of rows that do not compress away, so that the dump takes a moment.
    const c = await conn();
    await c.query('CREATE TABLE app.big (id INT PRIMARY KEY AUTO_INCREMENT, v MEDIUMTEXT)');
    const digits = '(SELECT 0 d UNION ALL SELECT 1 UNION ALL SELECT 2 UNION ALL SELECT 3 UNION ALL SELECT 4 UNION ALL SELECT 5 UNION ALL SELECT 6 UNION ALL SELECT 7 UNION ALL SELECT 8 UNION ALL SELECT 9)';
    const row = `CONCAT(${Array.from({ length: 16 }, () => 'SHA2(RAND(), 512)').join(', ')})`;
    await c.query(`INSERT INTO app.big (v) SELECT ${row} FROM ${digits} a, ${digits} b, ${digits} x, ${digits} y`);
    await c.end();
    expect(unfinished()).toEqual([]);
    await ok('POST', `${MYSQL}/${db.id}/backups`, { label: 'killed_mid' });
    const [partial] = await until('a dump being written', async () => {
      const u = unfinished();
      return u.length > 0 ? u : undefined;
    }, 30_000, 5);
    await lab.killAgent();
    expect(unfinished()).toEqual([partial]);
    await lab.startAgent();
    await until('the partial dump removed', async () => !existsSync(join(backupDir(), partial!)) || undefined, 30_000, 100);
    await waitStatus(lab, db.id, 'active', 60_000);
    // Nothing else was lost on the way: the finished backups are all listed.
    const listed = ((await ok('GET', `${MYSQL}/${db.id}/backups`)).data as any[]).map((b) => String(b.id));
    expect(listed).not.toContain(partial);
  });

  it('after an agent restart hosts.primary keeps serving and the status never says otherwise', async () => {
    // The servers run on while the agent is away; what a client sees through hosts.primary must
    // not change when the agent comes back, and the status must say what the client sees.
    const held = await conn();
    await lab.killAgent();
    const statuses: string[] = [];
    const failures: string[] = [];
    let stop = false;
    const probe = (async () => {
      while (!stop) {
        try {
          await held.query('SELECT 1');
        } catch (e) {
          failures.push(`held connection: ${(e as Error).message}`);
          return;
        }
        await new Promise((r) => setTimeout(r, 25));
      }
    })();
    const fresh = (async () => {
      while (!stop) {
        const status = (await lab.api('GET', `${MYSQL}/${db.id}`)).body.status as string;
        statuses.push(status);
        const err = await refusal({ source: '127.0.0.2', host: db.hosts.primary, port: 3306, user: 'linroot', password: access.password, ca: access.ca });
        if (err) failures.push(`new connection while ${status}: ${err.message}`);
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    await lab.startAgent();
    // Well past the agent's first reports and observations (it reports every 500 ms or on change).
    const t0 = Date.now();
    await until('6 s after the reconnect', async () => Date.now() - t0 > 6000 || undefined, 20_000, 100);
    stop = true;
    await Promise.all([probe, fresh]);
    await held.end().catch(() => undefined);
    expect(failures).toEqual([]);
    expect(new Set(statuses)).toEqual(new Set(['active']));
  });
});
