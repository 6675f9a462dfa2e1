import { describe, expect, it } from 'vitest';
import { FulcrumError } from '../../../lib/errors.js';
import { PROVISIONING_REASON, nextStatus, requireStatus, settle, type Observation } from '../../../control-plane/domain/databases/status-rules.js';
import type { DatabaseStatus } from '../../../control-plane/domain/databases/model.js';

const obs = (status: string, convergedGeneration = 5, error = ''): Observation =>
  ({ status, members: {}, caCertPem: '', error, usedDiskMb: 0, convergedGeneration });

function reason(fn: () => void): string | undefined {
  try {
    fn();
  } catch (e) {
    expect(e).toBeInstanceOf(FulcrumError);
    expect((e as FulcrumError).code).toBe('conflict');
    return (e as FulcrumError).errors[0]!.reason;
  }
  return undefined;
}

describe('database status rules', () => {
  it('guards operations by status with clear reasons', () => {
    expect(reason(() => requireStatus('provisioning', 'update'))).toBe(PROVISIONING_REASON);
    expect(reason(() => requireStatus('active', 'update'))).toBeUndefined();
    expect(reason(() => requireStatus('degraded', 'update'))).toBe('Your database is degraded; it can be updated only when it is active.');
    for (const s of ['active', 'failed', 'degraded'] as DatabaseStatus[]) {
      expect(reason(() => requireStatus(s, 'delete'))).toBeUndefined();
      expect(reason(() => requireStatus(s, 'restore'))).toBeUndefined();
    }
    expect(reason(() => requireStatus('updating', 'delete'))).toMatch(/active, failed or degraded/);
    expect(reason(() => requireStatus('backing_up', 'snapshot'))).toMatch(/backing_up/);
    expect(reason(() => requireStatus('updating', 'backups'))).toBeUndefined();
    expect(reason(() => requireStatus('provisioning', 'backups'))).toBe(PROVISIONING_REASON);
  });

  it('finishes provisioning only when the agent converged on the current generation', () => {
    const db = { status: 'provisioning' as const, generation: 5 };
    expect(nextStatus(db, obs('active', 4), false)).toEqual({ status: 'provisioning' });
    expect(nextStatus(db, obs('provisioning'), false)).toEqual({ status: 'provisioning' });
    expect(nextStatus(db, obs('active'), false)).toEqual({ status: 'active', complete: { outcome: 'finished' } });
    expect(nextStatus(db, obs('failed', 0), false)).toEqual({ status: 'provisioning' });
    expect(nextStatus(db, obs('failed', 0, 'mariadbd exited'), false)).toEqual({ status: 'failed', complete: { outcome: 'failed', message: 'mariadbd exited' } });
  });

  it('holds updating until convergence and operation-held statuses until their result', () => {
    expect(nextStatus({ status: 'updating', generation: 6 }, obs('active', 5), false).status).toBe('updating');
    expect(nextStatus({ status: 'updating', generation: 6 }, obs('active', 6), true).status).toBe('updating');
    expect(nextStatus({ status: 'updating', generation: 6 }, obs('active', 6), false)).toEqual({ status: 'active', complete: { outcome: 'finished' } });
    expect(nextStatus({ status: 'backing_up', generation: 5 }, obs('active'), true).status).toBe('backing_up');
    expect(nextStatus({ status: 'restoring', generation: 5 }, obs('degraded'), false).status).toBe('degraded');
    expect(settle('backing_up')).toBe('active');
    expect(settle('failed')).toBe('failed');
  });

  it('follows active/degraded/failed with notifications, and suspend/resume', () => {
    expect(nextStatus({ status: 'active', generation: 5 }, obs('degraded', 5, 'node 2 down'), false)).toEqual({ status: 'degraded', notify: { action: 'database_degraded', message: 'node 2 down' } });
    expect(nextStatus({ status: 'degraded', generation: 5 }, obs('active'), false)).toEqual({ status: 'active' });
    expect(nextStatus({ status: 'active', generation: 5 }, obs('failed'), false).notify?.action).toBe('database_failed');
    expect(nextStatus({ status: 'active', generation: 5 }, obs('provisioning'), false).status).toBe('active');
    expect(nextStatus({ status: 'active', generation: 5 }, obs('updating'), false)).toEqual({ status: 'updating' });
    expect(nextStatus({ status: 'updating', generation: 5 }, obs('active'), false)).toEqual({ status: 'active', complete: { outcome: 'finished' } });
    expect(nextStatus({ status: 'suspending', generation: 5 }, obs('suspended'), false)).toEqual({ status: 'suspended', complete: { outcome: 'finished' } });
    expect(nextStatus({ status: 'suspended', generation: 5 }, obs('active'), false).status).toBe('suspended');
    expect(nextStatus({ status: 'resuming', generation: 6 }, obs('active', 5), false).status).toBe('resuming');
    expect(nextStatus({ status: 'resuming', generation: 6 }, obs('active', 6), false).status).toBe('active');
  });
});

describe('failover seen by the control plane', () => {
  it('shows a 3-node cluster with a running replica as degraded, not failed', async () => {
    const { effectiveStatus } = await import('../../../control-plane/domain/databases/observer.js');
    const nodes = [{ role: 'down', state: 'stopped' }, { role: 'replica', state: 'running' }, { role: 'replica', state: 'running' }];
    expect(effectiveStatus(3, { status: 'failed', nodes })).toBe('degraded');
    expect(effectiveStatus(3, { status: 'failed', nodes: nodes.map((n) => ({ ...n, state: 'stopped' })) })).toBe('failed');
    expect(effectiveStatus(1, { status: 'failed', nodes: [{ role: 'down', state: 'stopped' }] })).toBe('failed');
    expect(effectiveStatus(3, { status: 'active', nodes })).toBe('active');
  });
});
