// integration-lane: concurrent (the process runtime in a temp root: two servers on 127.0.0.1 and free ports, removed by their own root).
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { q, withAdmin, type AdminTarget } from '../../../agent/mysql/admin.js';
import { divergedFromPrimary, type DivergedContext } from '../../../agent/database/diverged.js';
import { newDbState } from '../../../agent/database/state.js';
import { freePort } from './runtime-contract.js';

/**
 * Real MariaDB servers: a returning member (node 1, the old primary, with the cluster's
 * acknowledged writes) and the member the control plane named primary (node 3, wiped: it lacks
 * them, and its agent holds it read-only for lack of the position it was named for). Node 1 is
 * never rebuilt from node 3 while node 3 is not writable: it may be the member the control plane
 * names instead (docs/databases.md, "The position a promotion is for").
 */
describe('a returning member and a named primary that is not writable', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-heldback-'));
  const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  const target = async (name: string): Promise<AdminTarget> => ({ socketPath: (await rt.connection(name)).socketPath, password: '' });
  const start = async (name: string, serverId: number) => {
    const [engine] = await detectLocalCatalogue();
    if (!engine) throw new Error('no local mariadbd found: this test needs mariadb-server installed');
    await rt.ensure({
      name, labels: {}, dataDir: join(root, name), files: {}, host: '127.0.0.1', memoryMb: 256, cpus: 1, engine, port: await freePort(),
      config: `[mysqld]\ninnodb_buffer_pool_size=32M\nlog_bin=binlog\nserver_id=${serverId}\ngtid_strict_mode=ON\n`,
    });
  };

  beforeAll(async () => {
    await Promise.all([start('fulcrum-heldback-n1', 1), start('fulcrum-heldback-n3', 3)]);
    await withAdmin(await target('fulcrum-heldback-n1'), async (c) => {
      await c.query('CREATE DATABASE fh');
      await c.query('CREATE TABLE fh.t (id INT PRIMARY KEY)');
      await c.query('INSERT INTO fh.t VALUES (1), (2)');
    });
    await withAdmin(await target('fulcrum-heldback-n3'), (c) => c.query('SET GLOBAL read_only=ON'));
  }, 180_000);
  afterAll(async () => {
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true });
  }, 120_000);

  it('refuses to mark it for a rebuild while the primary is read-only, and reports its errant transactions once the primary serves', async () => {
    const state = { ...newDbState(9), addresses: ['127.0.0.1', '', '127.0.0.1'], primary: 3, term: 5, provisioned: true };
    const events: string[] = [];
    const primary = async <T>(fn: (c: Parameters<Parameters<typeof withAdmin>[1]>[0]) => Promise<T>) => withAdmin(await target('fulcrum-heldback-n3'), fn);
    const ctx: DivergedContext = {
      state, log: silentLogger(), adminTarget: () => target('fulcrum-heldback-n1'), save: async () => undefined, emit: (_a, m) => void events.push(m),
      primaryBinlogState: () => primary(async (c) => String((await q(c, 'SELECT @@gtid_binlog_state AS s'))[0]?.s ?? '')),
      primaryReadOnly: () => primary(async (c) => Number((await q(c, 'SELECT @@read_only AS r'))[0]?.r) === 1),
    };
    await expect(divergedFromPrimary(ctx, 1)).rejects.toThrow(/node 3\) lacks, and that primary is not writable yet/);
    expect([state.errant, state.rebuild, events]).toEqual([undefined, [], []]);
    // Its data is still there (only fenced: read-only).
    const [count, ro] = await withAdmin(await target('fulcrum-heldback-n1'), async (c) => [
      Number((await q(c, 'SELECT COUNT(*) AS n FROM fh.t'))[0]?.n), Number((await q(c, 'SELECT @@read_only AS r'))[0]?.r),
    ]);
    expect([count, ro]).toEqual([2, 1]);

    // A primary that serves (promoted, writable): the usual errant path, reported and marked.
    await primary((c) => c.query('SET GLOBAL read_only=OFF'));
    expect(await divergedFromPrimary(ctx, 1)).toBe(true);
    expect(state.rebuild).toEqual([1]);
    expect(state.errant?.gtids).toEqual(['0-1-1..3']);
    expect(events.join('\n')).toContain('errant transactions: node 1 had GTIDs 0-1-1..3');
  }, 120_000);
});
