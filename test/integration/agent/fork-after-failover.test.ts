// integration-lane: concurrent (agent-fixture slot 31: its own 127.76/78/79.31 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * Point-in-time forks of a 3-node source whose primary failed over (docs/agent.md §6, "Binlog
 * archive and forks"): rows are written every 100 ms through hosts.primary, each stamped by the
 * server, the primary is killed, writes resume on the promoted replica; a fork to a second
 * before the failover and one to a second after it each hold exactly the rows the source stamped
 * up to their second. The archive goes on from the new primary's binlogs. The old primary's
 * segments are rewritten as an older agent stored them (gzip) before the forks: they still replay.
 * Process runtime, real mariadbd, the agent in this process.
 */
import { createHash } from 'node:crypto';
import { readdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { gzipSync, zstdDecompressSync } from 'node:zlib';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { RunningAgent } from '../../../agent/main.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, type Driver } from './control-plane-driver.js';
import { middleSecond, startRowWriter } from '../../helpers/row-writer.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

const SOURCE = 51;
const CLIENT = '127.0.0.12';

describe('agent: forks of a 3-node source before and after its failover (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let agent: RunningAgent;
  let src: DesiredDatabase;
  const connect = (d: DesiredDatabase) =>
    connectFrom({ source: CLIENT, host: d.hostPrimary!, port: 3306, user: 'linroot', password: d.rootPassword!, ca: driver.db(Number(d.id))!.caCertPem });

  beforeAll(async () => {
    // Archive rounds every 2 s: the archive holds the old primary's binlogs before the failover
    // and must go on from the new primary's.
    fx = await createAgentFixture({ id: 'agent-fork-failover', slot: 31, extra: () => ({ binlogArchiveMs: 2000 }) });
    driver = fx.driver;
    agent = await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    src = desiredDb({
      id: SOURCE, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'semi_synch',
      hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'],
    });
    driver.setDatabases([src]);
    await driver.waitFor(() => driver.db(SOURCE)?.status === 'active', 90_000, 'source active');
  }, 120_000);

  afterAll(async () => {
    await fx?.close();
  });

  it('a fork to a second before the failover and one to a second after it hold exactly the rows stamped before their second', async () => {
    const c0 = await connect(src);
    await c0.query('CREATE DATABASE app');
    await c0.query('CREATE TABLE app.t (id INT PRIMARY KEY, ts DECIMAL(17,6) NOT NULL)');
    await c0.end();
    await driver.waitFor(() => Number(driver.db(SOURCE)?.oldestRestoreMs ?? 0) > 0, 120_000, 'a restorable instant');

    // A row every 100 ms through hosts.primary, each with when it was sent and acknowledged;
    // across the failover the writer reconnects and goes on.
    const writer = startRowWriter({ connect: () => connect(src) });
    const rows = writer.rows;
    const waitUntil = (ms: number, what: string) => driver.waitFor(() => Date.now() >= ms, ms - Date.now() + 60_000, what);

    // Before the failover: a second in the middle of ~6 s of writes, and writes past its end.
    const began = Date.now();
    await driver.waitFor(() => Date.now() - began > 6000 && rows.length > 30, 60_000, 'rows before the failover');
    const before = middleSecond(began);
    await waitUntil(before + 2500, 'writes past the first second');

    const c = agent.agent.database(SOURCE)!;
    const oldPrimary = c.state!.primary;
    const killedAt = Date.now();
    await agent.runtime.kill(c.nodeName(oldPrimary));
    await driver.waitFor(() => c.state!.primary !== oldPrimary, 60_000, 'a new primary');
    const n = rows.length;
    await driver.waitFor(() => rows.length > n + 5, 60_000, 'writes resumed');
    const resumed = rows[n]!.sentMs;
    // After the failover: a second in the middle of ~6 s of writes on the new primary.
    await waitUntil(resumed + 6000, 'rows after the failover');
    const after = middleSecond(resumed);
    await waitUntil(after + 2500, 'writes past the second second');
    await writer.stop();
    expect(before + 1000).toBeLessThan(killedAt);
    expect(after).toBeGreaterThan(killedAt);
    await driver.waitFor(() => driver.db(SOURCE)?.status === 'active', 120_000, 'the source active again');

    // The old primary's segments as an older agent archived them (gzip, `binlog+gzip`): both
    // forks replay them, the second then the new primary's zstd ones after them.
    const segDir = join(fx.stateDir, 'backups', String(SOURCE), 'binlog');
    let rewritten = 0;
    for (const seq of readdirSync(segDir)) {
      const mPath = join(segDir, seq, 'manifest.json');
      let m: Record<string, unknown>;
      try {
        m = JSON.parse(readFileSync(mPath, 'utf8'));
      } catch {
        continue;
      }
      if (m.node !== oldPrimary || m.format !== 'binlog+zstd') continue;
      const gz = gzipSync(zstdDecompressSync(readFileSync(join(segDir, seq, String(m.file)))));
      writeFileSync(join(segDir, seq, 'binlog.gz'), gz, { mode: 0o600 });
      writeFileSync(`${mPath}.tmp`, JSON.stringify({ ...m, format: 'binlog+gzip', file: 'binlog.gz', sizeBytes: gz.length, sha256: createHash('sha256').update(gz).digest('hex') }), { mode: 0o600 });
      renameSync(`${mPath}.tmp`, mPath);
      rmSync(join(segDir, seq, String(m.file)));
      rewritten++;
    }
    expect(rewritten).toBeGreaterThan(0);

    const forkOf = (id: number, T: number, k: number) => desiredDb({
      id, engineId: src.engineId, version: src.version, rootPassword: `Fork.Pass_${id}`,
      hostPrimary: `${fx.net}.${k}`, hostSecondary: `${fx.net}.${k + 1}`, allowList: ['0.0.0.0/0'], forkSource: SOURCE, forkRestoreMs: T,
    });
    const forks = [forkOf(52, before, 3), forkOf(53, after, 5)];
    driver.setDatabases([src, ...forks]);
    for (const f of forks) await driver.waitFor(() => driver.db(Number(f.id))?.status === 'active', 300_000, `fork ${f.id} active`);

    // What the source (now led by the promoted node) stamped each row with.
    const s = await connect(src);
    const [all] = await s.query('SELECT id, ts FROM app.t ORDER BY id');
    await s.end();
    const stamped = (all as any[]).map((r) => ({ id: Number(r.id), sec: Math.floor(Number(r.ts)) * 1000 }));
    for (const [f, T] of [[forks[0]!, before], [forks[1]!, after]] as const) {
      const fc = await connect(f);
      const [got] = await fc.query('SELECT id FROM app.t ORDER BY id');
      await fc.end();
      const inFork = (got as any[]).map((r) => Number(r.id));
      const expected = stamped.filter((r) => r.sec < T).map((r) => r.id);
      expect(inFork, `fork ${f.id} to ${new Date(T).toISOString()}`).toEqual(expected);
      expect(expected.length).toBeLessThan(stamped.length);
      const have = new Set(inFork);
      for (const r of rows) {
        if (r.ackMs < T) expect(have.has(r.id), `row ${r.id} acknowledged before ${T} in fork ${f.id}`).toBe(true);
        if (r.sentMs >= T) expect(have.has(r.id), `row ${r.id} sent at or after ${T} in fork ${f.id}`).toBe(false);
      }
      const st = JSON.parse(readFileSync(join(fx.stateDir, 'databases', String(f.id), 'state.json'), 'utf8'));
      expect(st.forkBase?.kind).toBe('physical');
    }
    // The fork after the failover needed rows only the new primary wrote, and its chain runs
    // from the base taken before the failover through the old primary's archived binlogs into
    // the new primary's: the archive went on from the new primary's files (they carry the same
    // GTIDs), with no new base.
    expect(stamped.some((r) => r.sec <= after && r.sec > killedAt)).toBe(true);
    const dir = join(fx.stateDir, 'backups', String(SOURCE), 'binlog');
    const segs = readdirSync(dir).map((x) => JSON.parse(readFileSync(join(dir, x, 'manifest.json'), 'utf8')));
    const newPrimary = c.state!.primary;
    expect(segs.some((m) => m.node === oldPrimary && m.closedMs < killedAt && m.format === 'binlog+gzip')).toBe(true);
    expect(segs.some((m) => m.node === newPrimary && m.closedMs > after && m.format === 'binlog+zstd')).toBe(true);
    const forkBase = (id: number) => JSON.parse(readFileSync(join(fx.stateDir, 'databases', String(id), 'state.json'), 'utf8')).forkBase.backupId;
    const base = JSON.parse(readFileSync(join(fx.stateDir, 'backups', String(SOURCE), String(forkBase(53)), 'manifest.json'), 'utf8'));
    expect(base.finishedMs).toBeLessThan(killedAt);
    console.log(`forks around a failover: ${segs.length} segments (${segs.filter((m) => m.node === oldPrimary).length} from the old primary), base ${base.id}, rows ${stamped.filter((r) => r.sec <= before).length}/${stamped.filter((r) => r.sec <= after).length}/${stamped.length}`);
  }, 600_000);
});
