// integration-lane: concurrent (agent-fixture slot 37: its own 127.76/78/79.37 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * A database deleted while the binlog archiver takes its first physical base (docs/agent.md,
 * "Delete"), at the two moments that went wrong: while mariadb-backup copies (its spool accepts
 * only a little per second, a slow disk, so it is still reading the server when the delete
 * arrives) and while the finished copy is compressed into the backup storage (a slow storage).
 * Before the delete cancelled the database's background work first, the server was stopped under
 * the copy, which outlived the delete ("Server has gone away"), or the base was committed into
 * the removed folder (ENOENT on its manifest.json.tmp), and the failures were warnings.
 */
import { execFileSync } from 'node:child_process';
import { createWriteStream, existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { runsWith } from '../../../lib/processes.js';
import { createLocalBackupStorage, type BackupStorage } from '../../../agent/backup/backup-storage.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { desiredDb, type Driver } from './control-plane-driver.js';
import { processesOf, slowSink } from './slow-io.js';

describe('agent: a database deleted while its first physical base is taken (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
  /** Which part of the base is slow: mariadb-backup's copy, or its storing afterwards. */
  let slow: 'copy' | 'store' = 'copy';

  beforeAll(async () => {
    fx = await createAgentFixture({
      id: 'agent-archive-delete',
      slot: 37,
      reconcileIntervalMs: 300,
      extra: () => {
        const real = createProcessRuntime({ root: join(fx.stateDir, 'runtime'), logger });
        const runtime: ContainerRuntime = {
          ...real,
          // The copy's spool is mariadb-backup's stdout (its descriptor): a slow writer goes
          // between, and, as with the descriptor itself, the output is in the file (or the
          // writer failed) when exec returns.
          exec: async (name, argv, io) => {
            if (!(slow === 'copy' && argv[0] === 'mariadb-backup' && io?.stdoutFd !== undefined)) return real.exec(name, argv, io);
            const sink = slowSink(createWriteStream('', { fd: io.stdoutFd, autoClose: false }), 256 * 1024);
            const written = finished(sink).catch(() => undefined);
            const res = await real.exec(name, argv, { ...io, stdoutFd: undefined, stdout: sink });
            await written;
            return res;
          },
        };
        const local = createLocalBackupStorage(join(fx.stateDir, 'backups'));
        const backupStorage: BackupStorage = {
          ...local,
          writer: async (db, id, file) => {
            const out = await local.writer(db, id, file);
            // Slow until the database's backups folder is gone: a store the delete did not stop
            // then finishes at once, and commits into the removed folder as on a loaded host.
            const folder = join(fx.stateDir, 'backups', String(db));
            return slow === 'store' && file.startsWith('base.mbstream') ? slowSink(out, 64 * 1024, () => existsSync(folder)) : out;
          },
        };
        return { logger, runtime, backupStorage, binlogArchiveMs: 2000 };
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

  /** Creates database `id`, waits until its first base is at `moment`, deletes it, checks what is left. */
  async function deleteDuring(id: number, moment: 'copy' | 'store'): Promise<void> {
    slow = moment;
    const [engine] = await detectLocalCatalogue();
    const host = `${fx.net}.${id - 40}`;
    const db = desiredDb({ id, engineId: engine!.id, version: engine!.version, hostPrimary: host, hostSecondary: `${fx.net}.${id - 30}`, allowList: ['0.0.0.0/0'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(id)?.status === 'active', 90_000, 'active');
    const ctl = fx.agent!.agent.database(id)!;
    const nodeDir = join(fx.stateDir, 'runtime', 'nodes', ctl.nodeName(1));
    const backupsDir = join(fx.stateDir, 'backups', String(id));
    expect(existsSync(nodeDir)).toBe(true);

    const sizes = (dir: string, prefix: string) => (existsSync(dir) ? readdirSync(dir) : []).filter((f) => f.startsWith(prefix))
      .reduce((n, f) => n + statSync(join(dir, f)).size, 0);
    const stored = () => (existsSync(backupsDir) ? readdirSync(backupsDir) : []).reduce((n, b) => n + sizes(join(backupsDir, b), 'base.mbstream'), 0);
    if (moment === 'copy') {
      // mariadb-backup is connected and copying: its spool is filling.
      await driver.waitFor(() => processesOf('mariadb-backup', nodeDir).length > 0 && sizes(join(nodeDir, 'run'), 'backup-spool-') > 0, 60_000, 'the first base being copied');
    } else {
      // The copy is done and its compressed bytes are going into the storage.
      await driver.waitFor(() => processesOf('mariadb-backup', nodeDir).length === 0 && stored() > 0, 60_000, 'the first base being stored');
    }
    const servers = processesOf('mariadbd', nodeDir);
    expect(servers).toHaveLength(1);

    const from = lines.length;
    driver.setDatabases([]);
    await driver.waitFor(() => driver.last() && !driver.db(id), 60_000, 'database gone from reports');

    // Nothing of it runs, and nothing of it is left: not now, and not a few seconds later (a
    // round still running would write its base or spool again).
    for (let i = 0; i < 2; i++) {
      expect(processesOf('mariadb-backup', nodeDir)).toEqual([]);
      expect(processesOf('mariadbd', nodeDir)).toEqual([]);
      // That server, not its number: pids are 15 bits here, and a loaded host reuses one within
      // seconds (and an exited server stays a zombie until the agent's process reaps it).
      for (const pid of servers) expect(runsWith(pid, nodeDir)).toBe(false);
      expect(await fx.agent!.runtime.list({})).toEqual([]);
      expect(existsSync(nodeDir)).toBe(false);
      expect(existsSync(backupsDir)).toBe(false);
      expect(readdirSync(join(fx.stateDir, 'databases'))).toEqual([]);
      if (i === 0) await new Promise((r) => setTimeout(r, 5000));
    }

    const after = lines.slice(from).map((l) => JSON.parse(l) as { level: number; msg: string; database?: number });
    expect(after.filter((l) => l.level >= 40)).toEqual([]);
    // The cancelled round says so, as information.
    expect(after.filter((l) => l.level === 30 && l.database === id).map((l) => l.msg)).toContain('binlog archive round cancelled');
    expect(after.some((l) => l.msg === 'deleted')).toBe(true);
    // The server was not stopped under the copy: no "gone away" anywhere.
    expect(lines.slice(from).join('\n')).not.toMatch(/gone away/i);
    expect(execFileSync('ss', ['-Hltn']).toString()).not.toContain(`${host}:3306`);
  }

  it('while mariadb-backup copies: the copy is stopped before the server, everything goes, no warning', async () => {
    await deleteDuring(41, 'copy');
  }, 240_000);

  it('while the copy is being stored: the partial base is removed, not committed into a removed folder, no warning', async () => {
    await deleteDuring(42, 'store');
  }, 240_000);
});
