// Serial e2e lane (no marker) though it would be safe beside others (startDbLab: port 0, its own 127.76/78/79 blocks, temp folders, containers named from its own agent): the longest e2e file
// (about 200 s), moved out of the concurrent lane to even out the two lanes' lengths (docs/testing.md).
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { engineOfSeries } from '../../helpers/engines.js';
import { boundarySecond, middleSecond, startRowWriter } from '../../helpers/row-writer.js';
import { MYSQL, connectFrom, startDbLab, until, waitStatus, type DbLab, type RuntimeKind } from './db-lab.js';

const wire = (ms: number) => new Date(ms).toISOString().slice(0, 19);
const CLIENT = '127.64.0.2';

/**
 * Acceptance 1 of point-in-time forks (docs/databases.md, "Fork"), on real MariaDB servers run
 * by a `fulcrum agent` process: rows are written through hosts.primary every 100 ms, each with
 * its commit acknowledged and its statement time stored by the server; a fork to a second T in the
 * middle holds exactly the rows the server stamped before T (every row acknowledged before T,
 * none from T itself or later: a restore to the second a bad DROP ran does not replay the DROP),
 * and the source still serves.
 */
describe.each([
  ['process', 1, false, '10.11'],
  ['process', 3, false, '10.11'],
  ['docker', 1, false, '10.11'],
  ['docker', 3, false, '10.11'],
  ['process', 1, true, '10.11'],
  // The newer series (scripts/build-mysql-image.sh --suite trixie): its own mariadb-backup
  // takes and prepares the physical base.
  ['docker', 1, false, '11.8'],
] as [RuntimeKind, 1 | 3, boolean, string][])('fork to a point in time (%s runtime, %i node source, encrypted %s, MariaDB %s)', (runtime, size, encrypted, series) => {
  let lab: DbLab;
  let src: any;
  let password = '';
  let ca = '';
  const tag = series === '10.11' ? '' : `-${series.replace('.', '')}`;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };
  const credentials = async (id: number) => ({
    password: (await ok('GET', `${MYSQL}/${id}/credentials`)).password as string,
    ca: Buffer.from((await ok('GET', `${MYSQL}/${id}/ssl`)).ca_certificate, 'base64').toString('utf8'),
  });

  /**
   * What a fork with the wrong rows was built from, for the failure message (one such run in CI
   * lacked the last row stamped before T and left nothing else to read): the rows that differ
   * with their stamps, the base and segments of the source's archive, and the agent's lines about
   * the fork and the source.
   */
  const diagnosis = (forkId: number, T: number, before: any[], inFork: Set<number>): string => {
    const expected = new Set(before.map((r) => Number(r.id)));
    const differ = [...new Set([...expected, ...inFork])].filter((id) => expected.has(id) !== inFork.has(id)).sort((a, b) => a - b);
    const read = (path: string) => { try { return JSON.parse(readFileSync(path, 'utf8')); } catch (err) { return `${path}: ${(err as Error).message}`; } };
    const backups = join(lab.agentDir, 'backups', String(src.id));
    const listed = (dir: string) => { try { return readdirSync(dir); } catch { return []; } };
    const segments = listed(join(backups, 'binlog')).map((n) => read(join(backups, 'binlog', n, 'manifest.json')))
      .map((m) => ({ seq: m.seq, gtidStart: m.gtidStart, gtidEnd: m.gtidEnd, closedMs: m.closedMs }));
    const bases = listed(backups).filter((n) => /^\d+$/.test(n)).map((n) => read(join(backups, n, 'manifest.json')))
      .map((m) => ({ id: m.id, type: m.type, snapshotGtid: m.snapshotGtid, finishedMs: m.finishedMs }));
    const forkState = read(join(lab.agentDir, 'databases', String(forkId), 'state.json'));
    const lines = lab.output().split('\n').filter((l) => l.includes(`"database":${forkId},`) || l.includes(`"database":${src.id},`) || l.includes(`"source":${src.id},`)).slice(-40);
    return [
      `T=${T} (${wire(T)}); rows in one and not the other: ${JSON.stringify(differ.map((id) => ({ id, expected: expected.has(id), ts: before.find((r) => Number(r.id) === id)?.ts })))}`,
      `fork base: ${JSON.stringify(forkState.forkBase ?? forkState)}`,
      `bases: ${JSON.stringify(bases)}`,
      `segments: ${JSON.stringify(segments)}`,
      'agent lines:', ...lines,
    ].join('\n');
  };

  beforeAll(async () => {
    lab = await startDbLab(`pitr-${runtime}-${size}${encrypted ? '-enc' : ''}${tag}`, runtime);
    await lab.startAgent();
    // The series asked for, never whichever engine the agent happens to list first.
    const engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, series);
    const created = await ok('POST', MYSQL, {
      label: `pitr-src-${runtime}-${size}${encrypted ? '-e' : ''}${tag}`, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: size, allow_list: ['0.0.0.0/0'], encrypted,
    });
    src = await waitStatus(lab, created.id, 'active', 240_000);
    ({ password, ca } = await credentials(src.id));
    const c = await connectFrom({ source: CLIENT, host: src.hosts.primary, port: 3306, user: 'linroot', password, ca });
    await c.query('CREATE DATABASE app');
    await c.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c.end();
  }, 300_000);
  afterAll(async () => {
    await lab?.close();
  });

  it('acceptance 1: the fork holds exactly the rows committed before the chosen second, and the source still serves', async () => {
    // The archive has a starting point once the agent's first round took its base backup.
    const oldest = await until('oldest_restore_time', async () => (await ok('GET', `${MYSQL}/${src.id}`)).oldest_restore_time ?? undefined, 120_000, 250);
    const oldestMs = Date.parse(`${oldest}Z`);

    // A row every 100 ms, each recorded with when it was sent and when its commit was acknowledged.
    const writer = startRowWriter({ connect: () => connectFrom({ source: CLIENT, host: src.hosts.primary, port: 3306, user: 'linroot', password, ca }) });
    const rows = writer.rows;
    const began = Date.now();
    await until('rows for 8 s', async () => (Date.now() - began > 8000 && rows.length > 40) || undefined, 60_000, 100);
    await until('writes past the middle of the run', async () => Date.now() > Math.max(middleSecond(began), oldestMs) + 3000 || undefined, 30_000, 100);
    await writer.stop();
    const stoppedMs = Date.now();

    // What the source says each row's statement time was (the second the binlog stamps it with).
    const s = await connectFrom({ source: CLIENT, host: src.hosts.primary, port: 3306, user: 'linroot', password, ca });
    const [all] = await s.query('SELECT id, ts FROM app.t ORDER BY id');
    const stamped = new Map((all as any[]).map((r) => [Number(r.id), Math.floor(Number(r.ts))]));
    // The chosen second: near the middle of the run, never before what can be restored, with rows
    // stamped in it and in the second before (the writes cross the boundary).
    const T = boundarySecond(stamped.values(), { fromMs: began, toMs: stoppedMs, notBeforeMs: oldestMs });
    expect(T, `a second with rows in it and in the one before: ${JSON.stringify([...new Set(stamped.values())])}`).toBeDefined();
    if (T === undefined) return;
    expect(rows.some((r) => r.ackMs < T)).toBe(true);
    expect(rows.some((r) => r.sentMs >= T)).toBe(true);

    // Bad forks are 400s naming the field.
    const bad = await lab.api('POST', MYSQL, { label: 'pitr-bad', region: 'us-east', type: 'g6-nanode-1', engine: src.engine + '/' + src.version, fork: { source: src.id, restore_time: wire(Date.now() + 3_600_000) } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors.map((e: any) => e.field)).toContain('fork.restore_time');
    const missing = await lab.api('POST', MYSQL, { label: 'pitr-bad', region: 'us-east', type: 'g6-nanode-1', engine: src.engine + '/' + src.version, fork: { source: 999_999, restore_time: wire(T) } });
    expect(missing.status).toBe(400);
    expect(missing.body.errors.map((e: any) => e.field)).toContain('fork.source');

    const started = Date.now();
    const fork = await ok('POST', MYSQL, {
      label: `pitr-fork-${runtime}-${size}${encrypted ? '-e' : ''}${tag}`, region: 'us-east', type: 'g6-nanode-1', engine: `${src.engine}/${src.version}`, cluster_size: size,
      allow_list: ['0.0.0.0/0'], fork: { source: src.id, restore_time: wire(T) },
    });
    expect(fork.fork).toEqual({ source: src.id, restore_time: wire(T) });
    const forked = await waitStatus(lab, fork.id, 'active', 300_000);
    const forkMs = Date.now() - started;
    const fc = await credentials(forked.id);
    const c = await connectFrom({ source: CLIENT, host: forked.hosts.primary, port: 3306, user: 'linroot', password: fc.password, ca: fc.ca });
    const [got] = await c.query('SELECT id, ts FROM app.t ORDER BY id');
    // The fork runs its source's server version.
    expect(forked.version).toBe(src.version);
    const [[{ v }]] = (await c.query('SELECT VERSION() AS v')) as any;
    expect(String(v).startsWith(src.version), `${v} vs ${src.version}`).toBe(true);
    expect(src.version.startsWith(`${series}.`)).toBe(true);
    await c.end();
    const inFork = new Set((got as any[]).map((r) => Number(r.id)));

    // The writes cross the boundary: rows stamped in the second before T and in T itself.
    expect([...stamped.values()].filter((sec) => sec * 1000 === T - 1000).length).toBeGreaterThan(0);
    expect([...stamped.values()].filter((sec) => sec * 1000 === T).length).toBeGreaterThan(0);
    // Exactly the rows stamped before T, none of second T: ids, count and a checksum of (id, ts).
    const sum = (list: any[]) => createHash('sha256').update(list.map((r) => `${r.id}:${r.ts}`).join('\n')).digest('hex');
    const before = (all as any[]).filter((r) => Math.floor(Number(r.ts)) * 1000 < T);
    expect([...inFork].sort((a, b) => a - b), diagnosis(forked.id, T, before, inFork)).toEqual(before.map((r) => Number(r.id)));
    expect((got as any[]).length).toBe(before.length);
    expect(sum(got as any[])).toBe(sum(before));
    // Against the client's own records: acknowledged before T -> there; sent at or after T -> not.
    for (const r of rows) {
      if (r.ackMs < T) expect(inFork.has(r.id), `row ${r.id} acknowledged before the chosen second`).toBe(true);
      if (r.sentMs >= T) expect(inFork.has(r.id), `row ${r.id} sent at or after the chosen second`).toBe(false);
    }
    // The source still serves: a write and every row it had.
    await s.query('INSERT INTO app.t VALUES (?, UNIX_TIMESTAMP(NOW(6)))', [1_000_000]);
    const [count] = await s.query('SELECT COUNT(*) AS n FROM app.t');
    expect(Number((count as any[])[0].n)).toBe(stamped.size + 1);
    await s.end();
    expect((await ok('GET', `${MYSQL}/${src.id}`)).status).toBe('active');
    // The archive the fork was built from: checksummed segments, encrypted exactly when the database is.
    const dir = join(lab.agentDir, 'backups', String(src.id), 'binlog');
    const manifests = readdirSync(dir).map((n) => JSON.parse(readFileSync(join(dir, n, 'manifest.json'), 'utf8')));
    expect(manifests.length).toBeGreaterThan(0);
    for (const m of manifests) {
      expect(m.format).toBe(encrypted ? 'binlog+zstd+aes-256-gcm' : 'binlog+zstd');
      const bytes = readFileSync(join(dir, String(m.seq), m.file));
      expect(m.sha256).toBe(createHash('sha256').update(bytes).digest('hex'));
      // Encrypted frames (FBK1) rather than a zstd stream anyone could read.
      expect(bytes.subarray(0, 4).toString('hex')).toBe(encrypted ? Buffer.from('FBK1').toString('hex') : '28b52ffd');
    }
    // The base the fork was built from: a physical copy (mariadb-backup), loaded as one (a
    // silent fall back to a logical load would fail here); an encrypted database's data files
    // need its own key file, so its bases stay logical dumps.
    const forkState = JSON.parse(readFileSync(join(lab.agentDir, 'databases', String(forked.id), 'state.json'), 'utf8'));
    expect(forkState.forkBase?.kind).toBe(encrypted ? 'logical' : 'physical');
    const base = JSON.parse(readFileSync(join(lab.agentDir, 'backups', String(src.id), String(forkState.forkBase.backupId), 'manifest.json'), 'utf8'));
    expect(base.type).toBe('base');
    expect(base.format).toBe(encrypted ? 'mariadb-dump+zstd+aes-256-gcm' : 'mariadb-backup+mbstream+zstd');
    console.log(`pitr fork (${runtime}, ${size} nodes, encrypted ${encrypted}, ${src.version}): ${inFork.size} of ${stamped.size} rows, ${forkState.forkBase.kind} base, active in ${forkMs} ms`);
  }, 600_000);
});
