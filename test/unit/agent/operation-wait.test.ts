import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { applyState, newDbState } from '../../../agent/database/state.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { createOperations, type OperationsHost } from '../../../agent/operations.js';

/**
 * An operation for a database still provisioning waits for the provisioning (agent/operations.ts).
 * Timers are faked and never advanced unless a test says so: the wait must end on the
 * controller's own change (the provisioning action ending, a delete beginning), not on a poll.
 */
describe('an operation waiting for its database\'s provisioning', () => {
  const dirs: string[] = [];
  afterEach(() => {
    vi.useRealTimers();
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });

  function setup() {
    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-op-wait-'));
    dirs.push(stateDir);
    const c = new DatabaseController({
      id: 5, agentId: 'a', agentKey: 'abcdef', stateDir, runtime: {} as ContainerRuntime, runtimeKind: 'process', catalogue: [],
      logger: silentLogger(), clock: new ManualClock(0), nodeAddressPool: '198.18.0.0/29', takenAddresses: () => new Set(), onChange: () => undefined,
    });
    c.state = { ...newDbState(5), provisioned: false };
    const host = { clock: new ManualClock(1000), database: (id: number) => (id === 5 ? c : undefined), reconcileNow: async () => undefined } as OperationsHost;
    const ops = createOperations({ host, stateDir, logger: silentLogger() });
    const ran: string[] = [];
    ops.register('deleteBackup', async (_c, op) => {
      ran.push(op.operationId);
    });
    const accept = (id: string) => ops.accept([{ operationId: id, databaseId: 5, kind: 'deleteBackup', deleteBackup: { backupId: 1 } } as never]);
    // Promise and file-system steps only: no timer is needed for any of them.
    const settle = async () => {
      for (let i = 0; i < 50; i++) await new Promise<void>((r) => setImmediate(r));
    };
    return { c, ops, ran, accept, settle };
  }

  it('starts as soon as the provisioning action ends, with no timer firing', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const { c, ops, ran, accept, settle } = setup();
    let finish!: () => void;
    const provisioning = c.runExclusive('provision', () => new Promise<void>((r) => (finish = r)));
    accept('op1');
    await settle();
    expect(ran).toEqual([]);
    // Provisioned, but the provisioning action still runs: the operation keeps waiting.
    applyState(c, { provisioned: true });
    await settle();
    expect(ran).toEqual([]);
    finish();
    await provisioning;
    await settle();
    expect(ran).toEqual(['op1']);
    expect(ops.results()).toMatchObject([{ operationId: 'op1', ok: true }]);
    // The ten-minute limit was cancelled with the wait: no timer is left.
    expect(vi.getTimerCount()).toBe(0);
  });

  it('ends with a conflict at once when the database is deleted meanwhile', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const { c, ops, ran, accept, settle } = setup();
    accept('op2');
    await settle();
    // A delete while the provisioning runs does not wait for it (controller.tick); here its
    // removal then fails (the runtime is a stub), but the delete began and that ends the wait.
    void c.runExclusive('provision', () => new Promise<void>(() => undefined));
    await settle();
    c.setDesired(undefined);
    await c.tick();
    await settle();
    expect(ran).toEqual([]);
    expect(ops.results()).toMatchObject([{ operationId: 'op2', ok: false, errorCode: 'conflict', error: 'the database is not provisioned' }]);
  });

  it('gives up after ten minutes of a provisioning that does not end', async () => {
    vi.useFakeTimers({ toFake: ['setTimeout', 'clearTimeout', 'setInterval', 'clearInterval', 'Date'] });
    const { ops, ran, accept, settle } = setup();
    accept('op3');
    await settle();
    vi.advanceTimersByTime(10 * 60_000 - 1_000);
    await settle();
    expect(ops.results()).toEqual([]);
    vi.advanceTimersByTime(2_000);
    await settle();
    expect(ran).toEqual([]);
    expect(ops.results()).toMatchObject([{ operationId: 'op3', ok: false, errorCode: 'conflict' }]);
  });
});
