import { existsSync, readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { systemClock, type Clock } from '../lib/clock.js';
import { FulcrumError, isFulcrumError } from '../lib/errors.js';
import { withoutStatementText, type Logger } from '../lib/logger.js';
import type { Operation__Output } from '../proto/gen/fulcrum/v1/Operation.js';
import type { OperationResult } from '../proto/gen/fulcrum/v1/OperationResult.js';
import type { DatabaseController } from './database/controller.js';

export type OperationKind = NonNullable<Operation__Output['kind']>;
export type OperationHandler = (c: DatabaseController, op: Operation__Output) => Promise<{ backupId?: number; position?: string } | void>;
/** Operation kind -> the handler that runs it. */
export type OperationHandlers = Partial<Record<OperationKind, OperationHandler>>;

/** What operations need from the agent. */
export interface OperationsHost {
  /** Stamps results (`finishedMs`). */
  readonly clock: Clock;
  /** The controller of a database, if the agent knows it. */
  database(id: number): DatabaseController | undefined;
  /** Runs a reconcile round now (a result or a requested patch is then acted on and reported). */
  reconcileNow(): Promise<void>;
}

/** How long an operation for a database still provisioning waits for it. */
const PROVISION_WAIT_MS = 10 * 60_000;

/** The handlers every agent has; day-two adds backups and restores (agent/day-two.ts). */
function coreHandlers(host: OperationsHost): OperationHandlers {
  return {
    patch: async (c) => {
      const done = c.requestPatch();
      void host.reconcileNow();
      await done;
    },
    // A planned switchover across hosts (docs/multi-host.md, "Planned switchover").
    fence: async (c, op) => ({ position: await c.fence(Number(op.fence?.term ?? 0), op.fence?.member ?? 0) }),
    catchUp: async (c, op) => {
      const x = op.catchUp;
      if (!x?.position) throw new FulcrumError('validation', 'catch_up needs a position');
      await c.catchUp(x.member, x.position, Math.min(x.timeoutMs || 10_000, 60_000));
    },
    // A rolling change across hosts (docs/multi-host.md, "Rolling changes across hosts").
    restartMember: async (c, op) => {
      await c.restartMember(op.restartMember?.member ?? 0, !!op.restartMember?.patch);
    },
    resetCredentials: async (c, op) => {
      const pw = op.resetCredentials?.newPassword ?? '';
      if (pw.length < 8) throw new Error('new_password must have at least 8 characters');
      await c.resetCredentials(pw);
    },
  };
}

/**
 * One-off operations from AgentDesired.operations: each operation_id runs at most once (its
 * result is persisted in `<stateDir>/operations.json`) and its result is repeated in every report
 * until the control plane stops sending the operation.
 */
export function createOperations(opts: { host: OperationsHost; stateDir: string; logger: Logger; handlers?: OperationHandlers }) {
  const { host } = opts;
  const file = join(opts.stateDir, 'operations.json');
  const results = new Map<string, OperationResult>();
  const running = new Set<string>();
  const handlers = new Map<OperationKind, OperationHandler>();
  const register = (kind: OperationKind, handler: OperationHandler) => handlers.set(kind, handler);
  for (const [kind, h] of Object.entries({ ...coreHandlers(host), ...opts.handlers })) if (h) register(kind as OperationKind, h);
  if (existsSync(file)) {
    try {
      for (const r of JSON.parse(readFileSync(file, 'utf8')) as OperationResult[]) results.set(r.operationId!, r);
    } catch {
      // A torn file only loses results the control plane will ask for again.
    }
  }
  // One write at a time, as for desired.json (agent/agent.ts): a prune and a result close
  // together would otherwise share the temporary file, and the second rename fail (ENOENT).
  let saving: Promise<void> = Promise.resolve();
  const save = () => {
    saving = saving.then(async () => {
      await writeFile(`${file}.tmp`, JSON.stringify([...results.values()]), { mode: 0o600 });
      await rename(`${file}.tmp`, file);
    }).catch((err) => opts.logger.error({ err }, 'could not persist operation results'));
    return saving;
  };

  /**
   * Waits until the database is provisioned and no provisioning runs, woken by the controller
   * when an action ends or a delete begins (`watch`); a delete, or PROVISION_WAIT_MS of wall time
   * (this waits on real work, whatever clock the agent was given), ends it with a conflict.
   */
  function waitProvisioned(c: DatabaseController): Promise<void> {
    const ready = () => !!c.state?.provisioned && c.busy !== 'provision';
    if (ready()) return Promise.resolve();
    return new Promise<void>((resolve, reject) => {
      const done = (err?: Error) => {
        stop();
        timer.cancel();
        if (err) reject(err);
        else resolve();
      };
      const notProvisioned = () => new FulcrumError('conflict', 'the database is not provisioned');
      const timer = systemClock.setTimeout(() => done(notProvisioned()), PROVISION_WAIT_MS);
      const stop = c.watch(() => {
        if (c.deleted) done(notProvisioned());
        else if (ready()) done();
      });
      if (c.deleted) done(notProvisioned());
    });
  }

  async function run(op: Operation__Output): Promise<void> {
    running.add(op.operationId);
    const result: OperationResult = { operationId: op.operationId, databaseId: op.databaseId, ok: true, error: '', backupId: 0, position: '' };
    const c = host.database(op.databaseId);
    try {
      if (!c) throw new FulcrumError('not_found', `database ${op.databaseId} is not on this agent`);
      const handler = op.kind ? handlers.get(op.kind) : undefined;
      if (!handler) throw new FulcrumError('conflict', `operation ${op.kind ?? '(none)'} is not supported by this agent`);
      await waitProvisioned(c);
      const out = await handler(c, op);
      if (out && out.backupId) result.backupId = out.backupId;
      if (out && out.position) result.position = out.position;
    } catch (err) {
      result.ok = false;
      // The text reaches the control plane's store and events: no statement text a server quoted.
      result.error = withoutStatementText((err as Error).message);
      result.errorCode = isFulcrumError(err) ? err.code : 'internal';
      // An operation a delete cancelled (docs/agent.md, "Delete") is no fault worth a warning.
      const deleted = c?.deleted === true;
      opts.logger[deleted ? 'info' : 'warn']({ op: op.operationId, kind: op.kind, database: op.databaseId, err: result.error }, deleted ? 'operation ended by the database\'s delete' : 'operation failed');
    }
    result.finishedMs = host.clock.now();
    running.delete(op.operationId);
    results.set(op.operationId, result);
    await save();
    void host.reconcileNow();
  }

  return {
    /** Adds or replaces the handler of one kind (the agent adds its day-two ones at start). */
    register(kind: OperationKind, handler: OperationHandler): void {
      register(kind, handler);
    },
    accept(list: Operation__Output[]) {
      const ids = new Set(list.map((o) => o.operationId));
      let pruned = false;
      for (const id of results.keys()) {
        if (!ids.has(id)) {
          results.delete(id);
          pruned = true;
        }
      }
      if (pruned) void save();
      for (const op of list) {
        if (!op.operationId || results.has(op.operationId) || running.has(op.operationId)) continue;
        void run(op);
      }
    },
    results: () => [...results.values()],
  };
}

export type Operations = ReturnType<typeof createOperations>;
