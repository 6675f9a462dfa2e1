import { randomUUID } from 'node:crypto';
import { Counter, type Registry } from 'prom-client';
import type { Clock } from '../../../lib/clock.js';
import type { Logger } from '../../../lib/logger.js';
import type { EventService } from '../events/event-service.js';
import type { DatabaseRepository } from './repository.js';
import { databaseRef } from './database-service.js';
import { AGENT_SILENT_MS, gtidProgress } from './failover-decision.js';
import { currentReports } from './failover-coordinator.js';
import { hostState } from './host-rules.js';
import { startPatchRollout, windowPatchDue } from './patch-rollout.js';
import { switchoverTarget, type Switchover, type SwitchoverTarget } from './switchover.js';
import type { AgentRecord, DatabaseRecord, MemberPlacement, MemberReport, OperationRecord } from './model.js';
import type { ActivationGate } from './activation-gate.js';

/**
 * How long one member's restart may take, from the operation stored to its agent's answer: a
 * stop, a start (a version upgrade adds mariadb-upgrade) and the member replicating again.
 */
export const RESTART_DEADLINE_MS = 180_000;
/** After its restart, how long a member may take to be reported a replica as far as the primary was. */
export const CATCH_UP_DEADLINE_MS = 60_000;
/**
 * A rollout stopped by a failure is taken up again this long after (each try restarts a member
 * or fences the primary, so a failing one must not repeat every second).
 */
export const ROLLOUT_RETRY_MS = 15_000;
/**
 * How many times a rollout may stop on a failure before it ends as failed: the action's event
 * (database_resize or database_update) reads `failed` with the last reason and the database
 * leaves resizing/updating. Counted over the whole rollout and kept in the store, so neither a
 * flapping member nor a control-plane restart makes the retries endless.
 */
export const ROLLOUT_ATTEMPTS = 3;
/**
 * The maintenance window's automatic patch of a spread cluster starts at most once in this long
 * per database (the longest window): one that failed is not started again and again in the same
 * window (a later window, or POST .../patch, tries again).
 */
export const WINDOW_PATCH_GAP_MS = 4 * 3_600_000;
/** How often the store is read for a restart's result and the member's reports. */
const POLL_MS = 50;

/** What a rollout does next for one database. Pure (rolloutStep). */
export type RolloutStep =
  | { kind: 'wait'; why: string }
  | { kind: 'restart'; member: number; agentId: string }
  | { kind: 'switchover'; target: SwitchoverTarget }
  | { kind: 'finish' };

/**
 * The next step of a rolling change of a spread cluster, given the members this rollout has
 * restarted (`done`): every replica first, one at a time and only while every member runs (a
 * replica restart leaves the primary the other replica's acknowledgements); then a planned
 * switchover onto a restarted replica; then the old primary, now a replica. A member on a host
 * that is not up and reporting is waited for.
 */
export function rolloutStep(
  db: Pick<DatabaseRecord, 'id' | 'primaryMember' | 'runState' | 'provisioned' | 'deleting'>, placements: readonly MemberPlacement[],
  reports: readonly MemberReport[], agents: readonly AgentRecord[], done: ReadonlySet<number>, now: number,
): RolloutStep {
  if (db.deleting || db.runState !== 'running' || !db.provisioned) return { kind: 'wait', why: 'the database is not running' };
  const mine = placements.filter((m) => m.databaseId === db.id);
  const current = currentReports(mine, reports);
  for (const m of mine) {
    const a = agents.find((x) => x.id === m.agentId);
    if (!a || hostState(a) !== 'up' || a.lastSeen === null || now - a.lastSeen > AGENT_SILENT_MS) return { kind: 'wait', why: `the agent of member ${m.member} is not up` };
    const r = current.get(m.member);
    const role = m.member === db.primaryMember ? 'primary' : 'replica';
    if (r?.state !== 'running' || r.role !== role) return { kind: 'wait', why: `member ${m.member} is not a running ${role}` };
  }
  const replica = mine.filter((m) => m.member !== db.primaryMember && !done.has(m.member)).sort((a, b) => a.member - b.member)[0];
  if (replica) return { kind: 'restart', member: replica.member, agentId: replica.agentId };
  if (!done.has(db.primaryMember)) {
    // Only a restarted replica may take over: the old primary is restarted last.
    const avoid = new Set(mine.filter((m) => !done.has(m.member)).map((m) => m.agentId));
    const target = switchoverTarget(db, mine, reports, agents, now, avoid);
    return target ? { kind: 'switchover', target } : { kind: 'wait', why: 'no restarted replica can take over' };
  }
  return { kind: 'finish' };
}

export interface RolloutDeps {
  repo: DatabaseRepository;
  events: EventService;
  clock: Clock;
  logger: Logger;
  switchover: Switchover;
  registry?: Registry;
  /** Says when the database may read `active` again (activation-gate.ts); without it, at once. */
  gate?: ActivationGate;
  /** The store changed (an operation, a status): push to the agents and data planes. */
  onChange: () => void;
}

/**
 * What a rollout keeps in its operation's payload: members restarted so far and failures so far,
 * and whether it is a patch (each member restarted on the catalogue's build even when its spec
 * is unchanged).
 */
interface RolloutProgress {
  done: number[];
  failures: number;
  patch?: boolean;
}

function progressOf(op: OperationRecord): RolloutProgress {
  const p = op.payload as Partial<RolloutProgress>;
  return {
    done: Array.isArray(p.done) ? p.done.filter((m) => Number.isInteger(m)) : [], failures: typeof p.failures === 'number' ? p.failures : 0,
    ...(p.patch === true ? { patch: true } : {}),
  };
}

/**
 * Rolling changes of clusters spread over agent hosts (docs/multi-host.md, "Rolling changes
 * across hosts"): a resize, a version upgrade or an engine_config change that needs a restart.
 * The update stores a `rollout` operation (never sent to an agent; it holds the status resizing
 * or updating, as a snapshot holds backing_up) and the lease holder's round runs it member by
 * member: a RestartMemberOp to each replica's agent, each replicating again before the next;
 * then the planned switchover the drain uses (switchover.ts) onto a restarted replica; then the
 * old primary's member. The members restarted so far and the failures so far are kept in the
 * rollout operation's payload, so a rollout taken up again after a control-plane restart (or on
 * another replica holding the lease) neither restarts a member twice nor switches over again;
 * an agent also answers at once for a member that already runs the desired spec. A step that
 * fails stops the rollout for ROLLOUT_RETRY_MS; the ROLLOUT_ATTEMPTS-th failure ends it (failed).
 */
export class Rollout {
  private readonly log: Logger;
  /** Databases with a step in flight in this process. */
  private readonly running = new Set<number>();
  /** Databases whose rollout stopped on a failure: not taken up again before this time (ms). */
  private readonly retryAt = new Map<number, number>();
  private readonly waits = new Map<number, string>();
  /** When this process last started a database's automatic patch (ms). */
  private readonly windowPatched = new Map<number, number>();
  private readonly steps?: Counter;

  constructor(private readonly d: RolloutDeps) {
    this.log = d.logger.child({ component: 'rollout' });
    if (d.registry) {
      this.steps = new Counter({ name: 'fulcrum_database_rollout_steps_total', help: 'Steps of rolling changes across hosts, by kind and result', labelNames: ['step', 'result'], registers: [d.registry] });
    }
  }

  /** A step of this database's rollout is under way in this process. */
  busy(databaseId: number): boolean {
    return this.running.has(databaseId);
  }

  /**
   * The lease holder's round: one step per database with a rollout pending, each run in the
   * background so that a long restart does not hold the other databases. Returns the steps started.
   */
  async tick(): Promise<Promise<void>[]> {
    if (await this.startWindowPatches()) this.d.onChange();
    const started: Promise<void>[] = [];
    const ops = (await this.d.repo.pendingOperations()).filter((op) => op.kind === 'rollout');
    for (const op of ops) {
      if (this.running.has(op.databaseId) || this.d.switchover.busy(op.databaseId)) continue;
      if ((this.retryAt.get(op.databaseId) ?? 0) > this.d.clock.now()) continue;
      this.running.add(op.databaseId);
      // Never rejects: the round does not await its steps, and recording a failure needs the
      // store too, which may be what failed.
      started.push(this.step(op).catch((err: unknown) => this.stopped(op, `an internal error: ${(err as Error).message}`))
        .catch((err: unknown) => this.log.error({ err, database: op.databaseId }, 'rollout failure not recorded'))
        .finally(() => this.running.delete(op.databaseId)));
    }
    return started;
  }

  /**
   * The maintenance window's patch of spread clusters (patch-rollout.ts, windowPatchDue): a
   * rollout marked `patch`, with status `updating` and a database_update event it completes, as
   * POST .../patch starts. Returns whether any started.
   */
  private async startWindowPatches(): Promise<boolean> {
    const now = this.d.clock.now();
    let started = false;
    for (const db of await this.d.repo.list()) {
      if (now - (this.windowPatched.get(db.id) ?? -Infinity) < WINDOW_PATCH_GAP_MS) continue;
      if (!db.patchPending || db.status !== 'active') continue;
      const began = await this.d.repo.transaction(async () => {
        const x = await this.d.repo.get(db.id);
        if (!x || !windowPatchDue(x, await this.d.repo.members(x.id), await this.d.repo.pendingOperations(x.id), now)) return false;
        const event = await this.d.events.record('database_update', databaseRef(x), { message: 'Patch applied in the maintenance window' });
        await startPatchRollout(this.d.repo, x.id, now);
        await this.d.repo.update(x.id, { status: 'updating', pendingEventId: event.id, secondEventId: null, updated: Math.floor(now / 1000) * 1000 });
        return true;
      });
      if (!began) continue;
      this.windowPatched.set(db.id, now);
      this.log.info({ database: db.id }, 'maintenance window patch started');
      started = true;
    }
    return started;
  }

  private async step(op: OperationRecord): Promise<void> {
    const db = await this.d.repo.get(op.databaseId);
    if (!db || db.deleting) return;
    const done = new Set(progressOf(op).done);
    const placements = await this.d.repo.members(db.id);
    const step = rolloutStep(db, placements, await this.d.repo.memberReports(db.id), await this.d.repo.agents(), done, this.d.clock.now());
    if (step.kind === 'wait') {
      if (this.waits.get(db.id) !== step.why) this.log.info({ database: db.id, why: step.why }, 'rollout waits');
      this.waits.set(db.id, step.why);
      return;
    }
    this.waits.delete(db.id);
    if (step.kind === 'restart') return this.restart(db, op, step.member, step.agentId, done);
    if (step.kind === 'switchover') {
      const out = await this.d.switchover.run(db.id, step.target, 'a rolling change');
      this.steps?.inc({ step: 'switchover', result: out.kind === 'switched' ? 'ok' : 'failed' });
      if (out.kind === 'abandoned') return this.stopped(op, `the switchover onto member ${step.target.member} was abandoned (${out.reason})`);
      return;
    }
    await this.finish(db, op);
  }

  /** Restarts one member through its agent and waits until it replicates as far as the primary was. */
  private async restart(db: DatabaseRecord, rollout: OperationRecord, member: number, agentId: string, done: Set<number>): Promise<void> {
    const started = this.d.clock.now();
    const id = randomUUID();
    const patch = progressOf(rollout).patch === true;
    await this.d.repo.createOperation({ id, databaseId: db.id, kind: 'restartMember', payload: { agent: agentId, member, ...(patch ? { patch } : {}) }, eventId: null, state: 'pending', error: null, created: started });
    this.d.onChange();
    this.log.info({ database: db.id, member, agent: agentId, rollout: rollout.id }, 'rollout restarts a member');
    const op = await this.answer(id, started + RESTART_DEADLINE_MS);
    if (op.state !== 'done') {
      this.steps?.inc({ step: 'restart', result: 'failed' });
      return this.stopped(rollout, `member ${member} on agent ${agentId} was not restarted: ${op.error ?? 'no answer'}`, [agentId]);
    }
    // The primary's position once the member answered: the member is back once it has it.
    const primary = currentReports(await this.d.repo.members(db.id), await this.d.repo.memberReports(db.id)).get(db.primaryMember);
    const target = gtidProgress(primary?.gtid ?? '');
    const deadline = this.d.clock.now() + CATCH_UP_DEADLINE_MS;
    for (;;) {
      const now = await this.d.repo.get(db.id);
      if (!now || now.deleting) return;
      const r = currentReports(await this.d.repo.members(db.id), await this.d.repo.memberReports(db.id)).get(member);
      if (r?.state === 'running' && r.role === 'replica' && gtidProgress(r.gtid) >= target) break;
      if (this.d.clock.now() >= deadline) {
        this.steps?.inc({ step: 'restart', result: 'failed' });
        return this.stopped(rollout, `member ${member} on agent ${agentId} was restarted but did not replicate again within ${CATCH_UP_DEADLINE_MS / 1000} s`, [agentId]);
      }
      await this.d.clock.sleep(POLL_MS);
    }
    done.add(member);
    await this.d.repo.setOperationPayload(rollout.id, { ...(await this.progress(rollout)), done: [...done].sort((a, b) => a - b) });
    this.steps?.inc({ step: 'restart', result: 'ok' });
    const s = Math.round((this.d.clock.now() - started) / 100) / 10;
    await this.d.events.record('database_update', databaseRef(db), {
      status: 'notification',
      message: `Rolling change: member ${member} on agent ${agentId} runs the new spec and replicates again (${s} s).`,
      hosts: [agentId],
    });
  }

  /** Waits for the restart's result in the store; past the deadline it is ended as failed. */
  private async answer(id: string, deadline: number): Promise<OperationRecord> {
    for (;;) {
      const op = await this.d.repo.operation(id);
      if (!op) return { id, databaseId: 0, kind: 'restartMember', payload: {}, eventId: null, state: 'failed', error: 'was removed', created: 0 };
      if (op.state !== 'pending') return op;
      if (this.d.clock.now() >= deadline) {
        const error = `did not answer within ${RESTART_DEADLINE_MS / 1000} s`;
        await this.d.repo.finishOperation(id, 'failed', error);
        this.d.onChange();
        return { ...op, state: 'failed', error };
      }
      await this.d.clock.sleep(POLL_MS);
    }
  }

  /** Every member runs the new spec: the rollout and the update's events end, the database is active. */
  private async finish(db: DatabaseRecord, op: OperationRecord): Promise<void> {
    // The switchover moved hosts.primary: `active` waits until the data planes route there (the
    // gate bounds the wait).
    for (;;) {
      const now = await this.d.repo.get(db.id);
      if (!now || now.deleting || !this.d.gate || (await this.d.gate.mayActivate(now))) break;
      await this.d.clock.sleep(POLL_MS);
    }
    await this.d.repo.transaction(async () => {
      const now = await this.d.repo.get(db.id);
      await this.d.repo.finishOperation(op.id, 'done', null);
      if (!now || now.deleting) return;
      if (now.pendingEventId !== null) await this.d.events.complete(now.pendingEventId, 'finished');
      if (now.secondEventId !== null) await this.d.events.complete(now.secondEventId, 'finished');
      const status = now.status === 'resizing' || now.status === 'updating' ? 'active' : now.status;
      await this.d.repo.update(db.id, { status, pendingEventId: null, secondEventId: null, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
    });
    this.retryAt.delete(db.id);
    this.d.onChange();
    await this.d.events.record('database_update', databaseRef(db), { status: 'notification', message: 'Rolling change done: every member runs the new spec.' });
    this.log.info({ database: db.id }, 'rollout done');
  }

  /** The rollout's progress as stored now (a step may have saved some since `op` was read). */
  private async progress(op: OperationRecord): Promise<RolloutProgress> {
    return progressOf((await this.d.repo.operation(op.id)) ?? op);
  }

  /**
   * A step failed: the database keeps serving as it is. Before ROLLOUT_ATTEMPTS failures the
   * rollout is taken up again after ROLLOUT_RETRY_MS, with a failed database_update event saying
   * why; the last failure ends it: the change's own events read `failed` with the reason (what
   * clients polling by action see) and the database is no longer shown resizing or updating.
   */
  /** `hosts`: the agent hosts the reason names (EventRecord.hosts). */
  private async stopped(op: OperationRecord, reason: string, hosts: string[] = []): Promise<void> {
    const databaseId = op.databaseId;
    this.retryAt.set(databaseId, this.d.clock.now() + ROLLOUT_RETRY_MS);
    const progress = await this.progress(op);
    const failures = progress.failures + 1;
    const db = await this.d.repo.get(databaseId);
    this.log.warn({ database: databaseId, reason, failures }, 'rollout stopped');
    if (!db) return;
    if (failures < ROLLOUT_ATTEMPTS) {
      await this.d.repo.setOperationPayload(op.id, { ...progress, failures });
      await this.d.events.record('database_update', databaseRef(db), {
        status: 'failed',
        message: `Rolling change stopped (failure ${failures} of ${ROLLOUT_ATTEMPTS}): ${reason}. The database keeps serving; the change is tried again in ${ROLLOUT_RETRY_MS / 1000} s.`,
        hosts,
      });
      return;
    }
    const restarted = progress.done.length > 0 ? `member${progress.done.length > 1 ? 's' : ''} ${progress.done.join(', ')} run${progress.done.length > 1 ? '' : 's'} the new spec, the others the old one` : 'no member runs the new spec yet';
    const message = `Rolling change failed after ${ROLLOUT_ATTEMPTS} failures: ${reason}. The database keeps serving (${restarted}); a new update rolls out again.`;
    await this.d.repo.transaction(async () => {
      const now = await this.d.repo.get(databaseId);
      await this.d.repo.finishOperation(op.id, 'failed', reason);
      if (!now || now.deleting) return;
      if (now.pendingEventId !== null) await this.d.events.complete(now.pendingEventId, 'failed', message);
      if (now.secondEventId !== null) await this.d.events.complete(now.secondEventId, 'failed', message);
      const status = now.status === 'resizing' || now.status === 'updating' ? 'active' : now.status;
      await this.d.repo.update(databaseId, { status, pendingEventId: null, secondEventId: null, updated: Math.floor(this.d.clock.now() / 1000) * 1000 });
    });
    this.retryAt.delete(databaseId);
    this.d.onChange();
    this.log.warn({ database: databaseId, reason }, 'rollout failed');
  }
}
