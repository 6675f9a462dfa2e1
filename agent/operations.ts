import { existsSync, readFileSync } from 'node:fs';
import { rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Logger } from '../lib/logger.js';
import type { Operation__Output } from '../proto/gen/fulcrum/v1/Operation.js';
import type { OperationResult } from '../proto/gen/fulcrum/v1/OperationResult.js';
import type { Agent } from './agent.js';
import type { DatabaseController } from './database-controller.js';

export type OperationKind = NonNullable<Operation__Output['kind']>;
export type OperationHandler = (c: DatabaseController, op: Operation__Output) => Promise<{ backupId?: number } | void>;

/**
 * One-off operations from AgentDesired.operations: each operation_id runs at most once (its
 * result is persisted in `<stateDir>/operations.json`) and its result is repeated in every report
 * until the control plane stops sending the operation.
 */
export function createOperations(opts: { agent: Agent; stateDir: string; logger: Logger }) {
  const file = join(opts.stateDir, 'operations.json');
  const results = new Map<string, OperationResult>();
  const running = new Set<string>();
  const handlers = new Map<OperationKind, OperationHandler>();
  if (existsSync(file)) {
    try {
      for (const r of JSON.parse(readFileSync(file, 'utf8')) as OperationResult[]) results.set(r.operationId!, r);
    } catch {
      // A torn file only loses results the control plane will ask for again.
    }
  }
  const save = () =>
    writeFile(`${file}.tmp`, JSON.stringify([...results.values()]))
      .then(() => rename(`${file}.tmp`, file))
      .catch((err) => opts.logger.error({ err }, 'could not persist operation results'));

  handlers.set('patch', async (c) => {
    await new Promise<void>((resolve, reject) => {
      c.patchRequested = { resolve: (err) => (err ? reject(new Error(err)) : resolve()) };
      void opts.agent.reconcileNow();
    });
  });
  handlers.set('resetCredentials', async (c, op) => {
    const pw = op.resetCredentials?.newPassword ?? '';
    if (pw.length < 8) throw new Error('new_password must have at least 8 characters');
    await c.runExclusive('sync-accounts', async () => {
      if (pw !== c.desired?.rootPassword) c.pendingPassword = pw;
      await c.syncAccounts();
    });
  });

  async function waitProvisioned(c: DatabaseController): Promise<void> {
    const end = Date.now() + 10 * 60_000;
    while (!c.state?.provisioned || c.busy === 'provision') {
      if (c.deleted || Date.now() > end) throw new Error('the database is not provisioned');
      await new Promise((r) => setTimeout(r, 200));
    }
  }

  async function run(op: Operation__Output): Promise<void> {
    running.add(op.operationId);
    const result: OperationResult = { operationId: op.operationId, databaseId: op.databaseId, ok: true, error: '', backupId: 0 };
    try {
      const c = opts.agent.database(op.databaseId);
      if (!c) throw new Error(`database ${op.databaseId} is not on this agent`);
      const handler = op.kind ? handlers.get(op.kind) : undefined;
      if (!handler) throw new Error(`operation ${op.kind ?? '(none)'} is not supported by this agent`);
      await waitProvisioned(c);
      const out = await handler(c, op);
      if (out && out.backupId) result.backupId = out.backupId;
    } catch (err) {
      result.ok = false;
      result.error = (err as Error).message;
      opts.logger.warn({ op: op.operationId, kind: op.kind, err: result.error }, 'operation failed');
    }
    result.finishedMs = opts.agent.clock.now();
    running.delete(op.operationId);
    results.set(op.operationId, result);
    await save();
    void opts.agent.reconcileNow();
  }

  return {
    register(kind: OperationKind, handler: OperationHandler) {
      handlers.set(kind, handler);
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
    /** True while an operation of this database runs (the agent treats it as busy). */
    running: () => running.size,
  };
}
