import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import type { DesiredDatabase__Output } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { DatabaseController } from '../../../agent/database/controller.js';
import { loadDbState, newDbState } from '../../../agent/database/state.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { databaseKey, keyToReport } from '../../../agent/backup/backup-key.js';

/**
 * docs/agent.md §6, "Backup store": the agent takes a database's backup key from the control
 * plane, never makes one when it was sent one, and keeps (and reports, to be adopted) a key it made
 * before the control plane made keys.
 */
describe('a database\'s backup key on the agent', () => {
  const dirs: string[] = [];
  afterEach(() => {
    for (const d of dirs.splice(0)) rmSync(d, { recursive: true, force: true });
  });
  const cpKey = Buffer.alloc(32, 1).toString('base64');
  const agentKey = Buffer.alloc(32, 2).toString('base64');
  const controller = (state: { backupKey?: string }, desiredKey: string | undefined) => {
    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-backup-key-'));
    dirs.push(stateDir);
    const c = new DatabaseController({
      id: 6, agentId: 'a', agentKey: 'abcdef', stateDir, runtime: {} as ContainerRuntime, runtimeKind: 'process', catalogue: [],
      logger: silentLogger(), clock: new ManualClock(0), nodeAddressPool: '198.18.0.0/29', takenAddresses: () => new Set(), onChange: () => undefined,
    });
    c.state = { ...newDbState(6), addresses: ['198.18.0.1'], provisioned: true, ...state };
    c.desired = { id: 6, clusterSize: 1, term: 1, primaryMember: 0, members: [{ index: 1, agentId: 'a', local: true, address: '' }], backupKey: desiredKey ?? '' } as unknown as DesiredDatabase__Output;
    return { c, stateDir };
  };

  it('takes the control plane\'s key as soon as it is sent, persists it, and reports none', async () => {
    const { c, stateDir } = controller({}, cpKey);
    await c.followDesired();
    expect(loadDbState(stateDir, 6)?.backupKey).toBe(cpKey);
    expect(await databaseKey(c)).toBe(cpKey);
    expect(keyToReport(c)).toBeUndefined();
  });

  it('uses the control plane\'s key when an object needs one before the state took it', async () => {
    const { c, stateDir } = controller({}, cpKey);
    expect(await databaseKey(c)).toBe(cpKey);
    expect(loadDbState(stateDir, 6)?.backupKey).toBe(cpKey);
  });

  it('keeps a key it made before (its objects are encrypted with it) and reports it for adoption', async () => {
    const { c } = controller({ backupKey: agentKey }, cpKey);
    await c.followDesired();
    expect(await databaseKey(c)).toBe(agentKey);
    expect(keyToReport(c)).toBe(agentKey);
    // Once the control plane has adopted it and sends it back, nothing is reported.
    c.desired = { ...c.desired!, backupKey: agentKey };
    expect(keyToReport(c)).toBeUndefined();
  });

  it('makes a key only when the control plane sent none (an older one), and reports it', async () => {
    const { c, stateDir } = controller({}, undefined);
    await c.followDesired();
    expect(c.state!.backupKey).toBeUndefined();
    const made = await databaseKey(c);
    expect(Buffer.from(made, 'base64')).toHaveLength(32);
    expect(made).not.toBe(cpKey);
    expect(loadDbState(stateDir, 6)?.backupKey).toBe(made);
    expect(keyToReport(c)).toBe(made);
  });
});
