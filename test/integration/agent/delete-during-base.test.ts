/**
 * A database deleted while the binlog archiver takes its first physical base (docs/agent.md,
 * "Delete"). The copy's output goes to a spool that accepts only a little per second (a slow
 * disk), so mariadb-backup is still running against the server when the delete arrives. Before
 * the delete cancelled the database's background work first, the server was stopped under the
 * copy ("Server has gone away"), the copy went on after the folders were removed (ENOENT on its
 * manifest, or the folder made again), and the failures were logged as warnings.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { desiredDb, type Driver } from './control-plane-driver.js';

const DB = 41;

/** A sink that takes about `bytesPerS`: the copy blocks on its output as on a slow disk. */
function slowSink(inner: NodeJS.WritableStream, bytesPerS: number): Writable {
  return new Writable({
    highWaterMark: 16 * 1024,
    write(chunk: Buffer, _enc, cb) {
      inner.write(chunk, (err) => (err ? cb(err) : setTimeout(() => cb(), (chunk.length * 1000) / bytesPerS)));
    },
    final(cb) {
      inner.end(() => cb());
    },
    destroy(err, cb) {
      (inner as Writable).destroy(err ?? undefined);
      cb(err);
    },
  });
}

/** Processes of `program` whose command line names `path` (ours: they run on this test's folder). */
function processesOf(program: string, path: string): number[] {
  const out: number[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (args[0]?.endsWith(program) && args.some((a) => a.includes(path))) out.push(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}

describe('agent: a database deleted while its first physical base is taken (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });

  beforeAll(async () => {
    fx = await createAgentFixture({
      id: 'agent-archive-delete',
      slot: 37,
      reconcileIntervalMs: 300,
      extra: () => {
        const real = createProcessRuntime({ root: join(fx.stateDir, 'runtime'), logger });
        const runtime: ContainerRuntime = {
          ...real,
          exec: (name, argv, io) => real.exec(name, argv, argv[0] === 'mariadb-backup' && io?.stdout ? { ...io, stdout: slowSink(io.stdout, 256 * 1024) } : io),
        };
        return { logger, runtime, binlogArchiveMs: 2000 };
      },
    });
    ({ driver } = fx);
    await fx.startAgent();
  }, 60_000);

  afterAll(async () => {
    // Only on a failure: a copy the delete left running is ours to end.
    for (const pid of (fx ? processesOf('mariadb-backup', fx.stateDir) : [])) process.kill(pid, 'SIGKILL');
    await fx?.close();
  });

  it('cancels the copy, removes everything and logs no warning', async () => {
    const [engine] = await detectLocalCatalogue();
    const db = desiredDb({ id: DB, engineId: engine!.id, version: engine!.version, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(DB)?.status === 'active', 90_000, 'active');
    const ctl = fx.agent!.agent.database(DB)!;
    const node = ctl.nodeName(1);
    const nodeDir = join(fx.stateDir, 'runtime', 'nodes', node);
    const backupsDir = join(fx.stateDir, 'backups', String(DB));
    expect(existsSync(nodeDir)).toBe(true);

    // The round's first base: mariadb-backup is connected and copying (its spool is filling).
    const spooled = () => readdirSync(join(nodeDir, 'run')).filter((f) => f.startsWith('backup-spool-'))
      .reduce((n, f) => n + statSync(join(nodeDir, 'run', f)).size, 0);
    await driver.waitFor(() => processesOf('mariadb-backup', nodeDir).length > 0 && spooled() > 0, 60_000, 'the first base being copied');
    const servers = processesOf('mariadbd', nodeDir);
    expect(servers).toHaveLength(1);

    const from = lines.length;
    driver.setDatabases([]);
    await driver.waitFor(() => driver.last() && !driver.db(DB), 60_000, 'database gone from reports');

    // Nothing of it runs, and nothing of it is left: not now, and not a few seconds later (a
    // round still running would write its base or spool again).
    for (let i = 0; i < 2; i++) {
      expect(processesOf('mariadb-backup', nodeDir)).toEqual([]);
      expect(processesOf('mariadbd', nodeDir)).toEqual([]);
      for (const pid of servers) expect(existsSync(`/proc/${pid}`)).toBe(false);
      expect(await fx.agent!.runtime.list({})).toEqual([]);
      expect(existsSync(nodeDir)).toBe(false);
      expect(existsSync(backupsDir)).toBe(false);
      expect(readdirSync(join(fx.stateDir, 'databases'))).toEqual([]);
      if (i === 0) await new Promise((r) => setTimeout(r, 5000));
    }

    const after = lines.slice(from).map((l) => JSON.parse(l) as { level: number; msg: string });
    expect(after.filter((l) => l.level >= 40)).toEqual([]);
    // The cancelled round says so, as information.
    expect(after.some((l) => l.level === 30 && /cancelled/.test(l.msg))).toBe(true);
    expect(after.some((l) => l.msg === 'deleted')).toBe(true);
    // The server was not stopped under the copy: no "gone away" anywhere.
    expect(lines.join('\n')).not.toMatch(/gone away/i);
    expect(execFileSync('ss', ['-Hltn']).toString()).not.toContain(`${db.hostPrimary}:3306`);
  }, 240_000);
});
