import { describe, expect, it } from 'vitest';
import { Rollout, rolloutStep } from '../../../control-plane/domain/databases/rollout.js';
import type { AgentRecord, DatabaseRecord, MemberReport, OperationRecord } from '../../../control-plane/domain/databases/model.js';
import type { DatabaseRepository } from '../../../control-plane/domain/databases/repository.js';
import type { Switchover } from '../../../control-plane/domain/databases/switchover.js';
import type { EventService } from '../../../control-plane/domain/events/event-service.js';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger, type Logger } from '../../../lib/logger.js';

const NOW = 1_000_000;
const agent = (id: string, o: Partial<AgentRecord> = {}): AgentRecord => ({
  id, region: 'us-east', runtime: 'process', membersAcrossHosts: true, connected: true, replica: '', lastSeen: NOW - 1000, appliedVersion: 1, engines: [], lostAt: null, drainingAt: null, ...o,
});
const agents = [agent('a'), agent('b'), agent('c')];
const placed = [{ databaseId: 7, member: 1, agentId: 'a' }, { databaseId: 7, member: 2, agentId: 'b' }, { databaseId: 7, member: 3, agentId: 'c' }];
const report = (member: number, agentId: string, o: Partial<MemberReport> = {}): MemberReport => ({
  databaseId: 7, member, agentId, state: 'running', role: 'replica', gtid: '0-1-5', address: `10.0.0.${member}:3306`, reported: 1, ...o,
});
const reports = (primary: number) => placed.map((m) => report(m.member, m.agentId, { role: m.member === primary ? 'primary' : 'replica' }));
const database = (o: Partial<DatabaseRecord> = {}) => ({ id: 7, primaryMember: 1, runState: 'running', provisioned: true, deleting: false, ...o }) as DatabaseRecord;

describe('a rolling change across hosts: the next step', () => {
  it('restarts the replicas one at a time, then switches over onto a restarted one, then restarts the old primary', () => {
    expect(rolloutStep(database(), placed, reports(1), agents, new Set(), NOW)).toEqual({ kind: 'restart', member: 2, agentId: 'b' });
    expect(rolloutStep(database(), placed, reports(1), agents, new Set([2]), NOW)).toEqual({ kind: 'restart', member: 3, agentId: 'c' });
    expect(rolloutStep(database(), placed, reports(1), agents, new Set([2, 3]), NOW)).toEqual({ kind: 'switchover', target: { member: 2, agentId: 'b' } });
    // After the switchover member 2 is primary and the old primary a replica: it is restarted last.
    expect(rolloutStep(database({ primaryMember: 2 }), placed, reports(2), agents, new Set([2, 3]), NOW)).toEqual({ kind: 'restart', member: 1, agentId: 'a' });
    expect(rolloutStep(database({ primaryMember: 2 }), placed, reports(2), agents, new Set([1, 2, 3]), NOW)).toEqual({ kind: 'finish' });
  });

  it('switches over only onto a restarted replica, the most advanced first', () => {
    const ahead = reports(1).map((r) => (r.member === 3 ? { ...r, gtid: '0-1-9' } : r));
    expect(rolloutStep(database(), placed, ahead, agents, new Set([2, 3]), NOW)).toEqual({ kind: 'switchover', target: { member: 3, agentId: 'c' } });
    // A failover during the rollout made member 3 primary before member 2 was restarted: 2 first.
    expect(rolloutStep(database({ primaryMember: 3 }), placed, reports(3), agents, new Set([3]), NOW)).toEqual({ kind: 'restart', member: 1, agentId: 'a' });
    expect(rolloutStep(database({ primaryMember: 3 }), placed, reports(3), agents, new Set([1, 2]), NOW)).toEqual({ kind: 'switchover', target: { member: 1, agentId: 'a' } });
  });

  it('waits while a member is not a running replica or primary, its host is not up, or the database does not run', () => {
    const down = reports(1).map((r) => (r.member === 3 ? { ...r, state: 'stopped', role: 'down' } : r));
    expect(rolloutStep(database(), placed, down, agents, new Set([2]), NOW)).toMatchObject({ kind: 'wait', why: 'member 3 is not a running replica' });
    // The old primary still says primary (or fenced) after a switchover: not yet a replica.
    expect(rolloutStep(database({ primaryMember: 2 }), placed, reports(1), agents, new Set([2, 3]), NOW)).toMatchObject({ kind: 'wait' });
    expect(rolloutStep(database(), placed, reports(1), [agent('a'), agent('b', { connected: false }), agent('c')], new Set(), NOW)).toMatchObject({ kind: 'wait', why: 'the agent of member 2 is not up' });
    expect(rolloutStep(database(), placed, reports(1), [agent('a'), agent('b', { lostAt: 1 }), agent('c')], new Set(), NOW).kind).toBe('wait');
    expect(rolloutStep(database(), placed, reports(1), [agent('a'), agent('b', { lastSeen: NOW - 60_000 }), agent('c')], new Set(), NOW).kind).toBe('wait');
    expect(rolloutStep(database({ runState: 'suspended' }), placed, reports(1), agents, new Set(), NOW).kind).toBe('wait');
    expect(rolloutStep(database({ deleting: true }), placed, reports(1), agents, new Set(), NOW).kind).toBe('wait');
    // A report from an agent the member is not placed on does not count.
    expect(rolloutStep(database(), placed, reports(1).map((r) => (r.member === 2 ? { ...r, agentId: 'x' } : r)), agents, new Set(), NOW).kind).toBe('wait');
  });
});

describe('a rolling change across hosts: a round whose store fails', () => {
  it('settles every step it started even when the step and the recording of its failure both fail (the round does not await them: a rejection would end the control plane)', async () => {
    const op: OperationRecord = { id: 'op-1', databaseId: 7, kind: 'rollout', payload: {}, eventId: null, state: 'pending', error: null, created: NOW };
    const down = async () => {
      throw new Error('the store is down');
    };
    const logged: string[] = [];
    const logger = { ...silentLogger(), child: () => logger, error: (_o: unknown, msg: string) => void logged.push(msg) } as unknown as Logger;
    const rollout = new Rollout({
      repo: { list: async () => [], pendingOperations: async () => [op], get: down, operation: down } as unknown as DatabaseRepository,
      events: {} as EventService, clock: new ManualClock(NOW), logger, switchover: { busy: () => false } as unknown as Switchover, onChange: () => undefined,
    });
    const started = await rollout.tick();
    expect(started).toHaveLength(1);
    await expect(Promise.all(started)).resolves.toBeDefined();
    expect(logged).toEqual(['rollout failure not recorded']);
    // The next round may start the database's rollout again.
    expect(rollout.busy(7)).toBe(false);
  });
});
