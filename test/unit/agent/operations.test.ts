import { existsSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { pino } from 'pino';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { createOperations, type OperationsHost } from '../../../agent/operations.js';
import type { DatabaseController } from '../../../agent/database/controller.js';

const dirs: string[] = [];
// A write queued behind the one a test waited for can still create operations.json.tmp while the
// folder is removed: Node 24's recursive rmSync then fails with ENOTEMPTY (Node 20's retried once).
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 })));

function setup() {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-ops-'));
  dirs.push(stateDir);
  const controller = { id: 1, state: { provisioned: true }, busy: undefined, deleted: false } as unknown as DatabaseController;
  const host = {
    clock: new ManualClock(1000),
    database: (id: number) => (id === 1 ? controller : undefined),
    reconcileNow: async () => undefined,
  } as unknown as OperationsHost;
  return { stateDir, host, make: () => createOperations({ host, stateDir, logger: silentLogger() }) };
}
const until = async (cond: () => boolean) => {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
};

describe('operations', () => {
  it('runs each operation id once, reports its result until the control plane drops it', async () => {
    const { make } = setup();
    const ops = make();
    let calls = 0;
    ops.register('snapshot', async () => {
      calls++;
      return { backupId: 7 };
    });
    const op = { operationId: 'a', databaseId: 1, snapshot: { label: 'x', target: 'primary' }, kind: 'snapshot' as const };
    ops.accept([op as any]);
    ops.accept([op as any]);
    await until(() => ops.results().length === 1);
    ops.accept([op as any]);
    expect(calls).toBe(1);
    expect(ops.results()[0]).toMatchObject({ operationId: 'a', ok: true, backupId: 7, finishedMs: 1000 });
    ops.accept([]);
    expect(ops.results()).toEqual([]);
  });

  it('results finishing together and a prune are written one at a time: no write fails, the last state lands', async () => {
    const { host, stateDir } = setup();
    const errors: string[] = [];
    const logger = pino({ level: 'error' }, new Writable({
      write(chunk: Buffer, _enc, cb) {
        errors.push(chunk.toString());
        cb();
      },
    }));
    const ops = createOperations({ host, stateDir, logger });
    ops.register('deleteBackup', async () => undefined);
    const list = Array.from({ length: 20 }, (_, i) => ({ operationId: `p${i}`, databaseId: 1, deleteBackup: { backupId: i }, kind: 'deleteBackup' }));
    ops.accept(list as any);
    await until(() => ops.results().length === 20);
    // The control plane drops them all (a deleted database's operations go with it).
    ops.accept([]);
    const persisted = join(stateDir, 'operations.json');
    await until(() => existsSync(persisted) && readFileSync(persisted, 'utf8') === '[]');
    await new Promise((r) => setTimeout(r, 50));
    expect(readFileSync(persisted, 'utf8')).toBe('[]');
    // Before, each write shared operations.json.tmp and the later renames failed with ENOENT.
    expect(errors).toEqual([]);
  });

  it('persists results across a restart so an operation is not run twice', async () => {
    const { make, stateDir } = setup();
    const first = make();
    let calls = 0;
    first.register('deleteBackup', async () => {
      calls++;
    });
    const op = { operationId: 'b', databaseId: 1, deleteBackup: { backupId: 3 }, kind: 'deleteBackup' as const };
    first.accept([op as any]);
    await until(() => first.results().length === 1);
    // The result is reported first and written after; wait for the write, not for a fixed time
    // (20 ms was not enough on a loaded machine).
    const persisted = join(stateDir, 'operations.json');
    await until(() => existsSync(persisted) && readFileSync(persisted, 'utf8').includes('"b"'));
    const second = make();
    second.register('deleteBackup', async () => {
      calls++;
    });
    second.accept([op as any]);
    expect(calls).toBe(1);
    expect(second.results()).toHaveLength(1);
  });

  it('reports failures with a reason: unknown database, unsupported kind, handler error', async () => {
    const { make } = setup();
    const ops = make();
    ops.register('restore', async () => {
      throw new Error('backup 4 is corrupted');
    });
    ops.accept([
      { operationId: 'c', databaseId: 9, kind: 'restore', restore: { backupId: 4 } } as any,
      { operationId: 'd', databaseId: 1, kind: 'restore', restore: { backupId: 4 } } as any,
      { operationId: 'e', databaseId: 1 } as any,
      { operationId: 'f', databaseId: 1, kind: 'resetCredentials', resetCredentials: { newPassword: 'short' } } as any,
    ]);
    await until(() => ops.results().length === 4);
    const by = Object.fromEntries(ops.results().map((r) => [r.operationId, r]));
    expect(by.c).toMatchObject({ ok: false, error: 'database 9 is not on this agent' });
    expect(by.d).toMatchObject({ ok: false, error: 'backup 4 is corrupted' });
    expect(by.e!.error).toMatch(/not supported/);
    expect(by.f!.error).toMatch(/at least 8 characters/);
  });

  it('sends no statement text a server error quoted (it is stored and shown by the control plane)', async () => {
    const { make } = setup();
    const ops = make();
    ops.register('resetCredentials', async () => {
      throw new Error("You have an error in your SQL syntax; check the manual for the right syntax to use near 'BY 'pw-secret-1'' at line 1");
    });
    ops.accept([{ operationId: 'g', databaseId: 1, kind: 'resetCredentials', resetCredentials: { newPassword: 'long-enough-1' } } as any]);
    await until(() => ops.results().length === 1);
    expect(ops.results()[0]!.error).toMatch(/syntax to use near '\[redacted\]'/);
    expect(ops.results()[0]!.error).not.toContain('pw-secret-1');
  });
});

describe('operations ended by a delete', () => {
  it('an operation that fails because its database is being deleted logs info, any other failure a warning', async () => {
    const { host, stateDir } = setup();
    const lines: { level: number; msg: string }[] = [];
    const logger = pino({ level: 'info' }, new Writable({
      write(chunk: Buffer, _enc, cb) {
        lines.push(JSON.parse(chunk.toString()) as { level: number; msg: string });
        cb();
      },
    }));
    const ops = createOperations({ host, stateDir, logger });
    const c = host.database(1)!;
    ops.register('snapshot', async () => {
      throw new Error('mariadb-dump failed (1): cancelled');
    });
    const op = (id: string) => ({ operationId: id, databaseId: 1, snapshot: { label: 'x', target: 'primary' }, kind: 'snapshot' as const });
    ops.accept([op('a') as any]);
    await until(() => ops.results().length === 1);
    c.deleted = true;
    ops.accept([op('a') as any, op('b') as any]);
    await until(() => ops.results().length === 2);
    expect(ops.results().map((r) => r.ok)).toEqual([false, false]);
    expect(lines.map((l) => [l.level, l.msg])).toEqual([[40, 'operation failed'], [30, "operation ended by the database's delete"]]);
  });
});
