// integration-lane: concurrent (agent-fixture slot 20: its own 127.76/78/79.20 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * A rolling restart (a resize) of a 3-node database while the binlog archiver takes its first
 * physical base from the primary (docs/agent.md §6, "Binlog archive and forks"). On a loaded host
 * the base of a new database is still being copied when the first change arrives; the copy holds
 * backup locks on the primary and grows its redo log, and the switchover's `SET GLOBAL read_only`
 * beside it waited for ever: the database stayed `resizing`. The action now stops the round first
 * (its copy killed, its partial files removed), and the base is taken again afterwards.
 */
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { finished } from 'node:stream/promises';
import { pino } from 'pino';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { desiredDb, testNet, type Driver } from './control-plane-driver.js';
import { processesOf, slowSink } from './slow-io.js';

describe('agent: a rolling restart while the primary is being copied for a base (process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  const lines: string[] = [];
  const logger = pino({ level: 'info' }, { write: (l: string) => lines.push(l) });
  const net = testNet('127.78', 20);
  let slow = true;

  beforeAll(async () => {
    fx = await createAgentFixture({
      id: 'agent-rolling-base',
      slot: 20,
      reconcileIntervalMs: 300,
      extra: () => {
        const real = createProcessRuntime({ root: join(fx.stateDir, 'runtime'), logger });
        const runtime: ContainerRuntime = {
          ...real,
          exec: async (name, argv, io) => {
            if (!(argv[0] === 'mariadb-backup' && io?.stdoutFd !== undefined)) return real.exec(name, argv, io);
            const sink = slowSink(createWriteStream('', { fd: io.stdoutFd, autoClose: false }), 256 * 1024, () => slow);
            const written = finished(sink).catch(() => undefined);
            const res = await real.exec(name, argv, { ...io, stdoutFd: undefined, stdout: sink });
            await written;
            return res;
          },
        };
        return { logger, runtime, binlogArchiveMs: 2000 };
      },
    });
    ({ driver } = fx);
    await fx.startAgent();
  }, 60_000);

  afterAll(async () => {
    for (const pid of (fx ? processesOf('mariadb-backup', fx.stateDir) : [])) process.kill(pid, 'SIGKILL');
    await fx?.close();
  });

  it('stops the copy, finishes the resize, and takes the base again afterwards', async () => {
    const [engine] = await detectLocalCatalogue();
    const db = desiredDb({
      id: 5, engineId: engine!.id, version: engine!.version, clusterSize: 3, replicationType: 'semi_synch',
      hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['0.0.0.0/0'],
    });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(5)?.status === 'active', 90_000, 'active');
    const ctl = fx.agent!.agent.database(5)!;
    const primaryDir = join(fx.stateDir, 'runtime', 'nodes', ctl.nodeName(ctl.state!.primary));
    await driver.waitFor(() => processesOf('mariadb-backup', primaryDir).length > 0, 60_000, 'the first base being copied from the primary');

    // A larger plan: every node restarts with its new limits, the primary last, after a switchover.
    const from = lines.length;
    driver.setDatabases([{ ...db, type: { id: 'g6-standard-1', memoryMb: 2048, vcpus: 1, diskMb: 51200 }, generation: 2 }]);
    await driver.waitFor(() => ctl.busy === 'rolling', 30_000, 'the rolling restart started');
    await driver.waitFor(() => ctl.busy === undefined && driver.db(5)?.status === 'active', 120_000, 'the rolling restart done');
    const during = lines.slice(from).map((l) => JSON.parse(l) as { level: number; msg: string; database?: number; why?: string; action?: unknown });
    expect(during.some((l) => l.database === 5 && l.msg === 'binlog archive round cancelled' && /rolling/.test(l.why ?? ''))).toBe(true);
    expect(during.some((l) => l.database === 5 && l.msg === 'action done' && (l.action as { kind?: string })?.kind === 'rolling')).toBe(true);
    expect(processesOf('mariadb-backup', fx.stateDir)).toEqual([]);

    // The round comes back once the action is over, and its base is taken.
    slow = false;
    await driver.waitFor(() => lines.slice(from).some((l) => l.includes('"database":5') && l.includes('physical base backup taken')), 90_000, 'the base taken after the resize')
      .catch((err: Error) => {
        throw new Error(`${err.message}\n${lines.slice(from).filter((l) => l.includes('"database":5') || /"level":[456]0/.test(l)).slice(-40).join('\n')}`);
      });
  }, 300_000);
});
