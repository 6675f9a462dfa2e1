import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { FulcrumError } from '../../../lib/errors.js';
import { silentLogger } from '../../../lib/logger.js';
import { createOperations, type OperationsHost } from '../../../agent/operations.js';
import type { DatabaseController } from '../../../agent/database/controller.js';

const dirs: string[] = [];
afterEach(() => dirs.splice(0).forEach((d) => rmSync(d, { recursive: true, force: true, maxRetries: 5, retryDelay: 50 })));

describe('operation results carry a stable error code', () => {
  it('names the code of a FulcrumError, internal for any other error, none on success', async () => {
    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-opcodes-'));
    dirs.push(stateDir);
    const controller = { id: 1, state: { provisioned: true }, busy: undefined, deleted: false } as unknown as DatabaseController;
    const host = { clock: new ManualClock(1000), database: (id: number) => (id === 1 ? controller : undefined), reconcileNow: async () => undefined } as unknown as OperationsHost;
    const ops = createOperations({ host, stateDir, logger: silentLogger() });
    ops.register('snapshot', async (_c, op) => {
      if (op.operationId === 'busy') throw new FulcrumError('conflict', 'a backup is running');
      if (op.operationId === 'broken') throw new Error('disk full');
      return { backupId: 3 };
    });
    const op = (operationId: string, databaseId = 1) => ({ operationId, databaseId, kind: 'snapshot', snapshot: { label: 'x', target: 'primary' } }) as never;
    ops.accept([op('busy'), op('broken'), op('fine'), op('elsewhere', 2)]);
    for (let i = 0; i < 400 && ops.results().length < 4; i++) await new Promise((r) => setTimeout(r, 5));
    const byId = Object.fromEntries(ops.results().map((r) => [r.operationId, r]));
    expect(byId.busy).toMatchObject({ ok: false, error: 'a backup is running', errorCode: 'conflict' });
    expect(byId.broken).toMatchObject({ ok: false, error: 'disk full', errorCode: 'internal' });
    expect(byId.elsewhere).toMatchObject({ ok: false, error: 'database 2 is not on this agent', errorCode: 'not_found' });
    expect(byId.fine).toMatchObject({ ok: true, backupId: 3 });
    expect(byId.fine!.errorCode ?? '').toBe('');
  });
});
