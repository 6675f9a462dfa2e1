import { createHash } from 'node:crypto';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Registry } from 'prom-client';
import { systemClock, type Clock, type Timer } from '../lib/clock.js';
import { parseCidr } from '../lib/ipv4.js';
import type { Logger } from '../lib/logger.js';
import type { AgentDesired__Output } from '../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentReport } from '../proto/gen/fulcrum/v1/AgentReport.js';
import type { Operation__Output } from '../proto/gen/fulcrum/v1/Operation.js';
import type { OperationResult } from '../proto/gen/fulcrum/v1/OperationResult.js';
import type { Catalogue } from './catalogue.js';
import { DatabaseController, type ControllerExtras } from './database/controller.js';
import { LABEL_AGENT, LABEL_DATABASE, type ContainerRuntime } from './runtime/container-runtime.js';
import { createAgentMetrics, type AgentMetrics } from './agent-metrics.js';
import { createOperations, type OperationHandlers, type OperationKind } from './operations.js';

export interface AgentOptions {
  id: string;
  stateDir: string;
  runtime: ContainerRuntime;
  runtimeKind: 'process' | 'docker';
  catalogue: Catalogue;
  logger: Logger;
  registry: Registry;
  clock: Clock;
  nodeAddressPool?: string;
  /** The backup store's identity (storeIdentity), '' or absent for local folders. */
  backupStore?: string;
  reconcileIntervalMs?: number;
  /** Day-two hooks (backups, maintenance windows); see agent/day-two.ts. */
  extras?: (agent: Agent) => ControllerExtras & {
    tick?: () => void;
    close?: () => Promise<void>;
    handlers?: OperationHandlers;
  };
}

export type AgentObservation = Omit<AgentReport, 'agentId' | 'region' | 'atMs' | 'hello' | 'heartbeat'>;

export interface Agent {
  readonly stateDir: string;
  readonly clock: Clock;
  readonly logger: Logger;
  readonly runtime: ContainerRuntime;
  readonly metrics: AgentMetrics;
  start(): Promise<void>;
  setDesired(desired: AgentDesired__Output): void;
  report(): AgentObservation;
  onChange(listener: () => void): void;
  /** The controller of a database, if the agent knows it. */
  database(id: number): DatabaseController | undefined;
  databases(): DatabaseController[];
  /** Runs one reconcile round now and waits for the actions it started. */
  reconcileNow(): Promise<void>;
  /** The control stream says whether it holds a stream to a control plane now. */
  controlPlaneConnected(connected: boolean): void;
  /** Since when (this clock) no control-plane stream has been held; undefined while one is. */
  disconnectedSince(): number | undefined;
  close(): Promise<void>;
}

/**
 * The agent's core: keeps the desired state (persisted for static stability), one controller
 * per database, the reconcile loop, and the operation results. See docs/agent.md.
 */
export function createAgent(opts: AgentOptions): Agent {
  const log = opts.logger.child({ component: 'agent' });
  const controllers = new Map<number, DatabaseController>();
  const listeners: (() => void)[] = [];
  const desiredFile = join(opts.stateDir, 'desired.json');
  let persisting: Promise<void> = Promise.resolve();
  const agentKey = createHash('sha256').update(opts.id).digest('hex').slice(0, 6);
  let desired: AgentDesired__Output | undefined;
  let timer: Timer | undefined;
  let lastReport = '';
  let closed = false;
  // Counted from the start: an agent that never reaches a control plane is disconnected.
  let disconnectedSince: number | undefined = opts.clock.now();
  const inflight = new Set<Promise<void>>();

  // Members on loopback addresses cannot be reached from another host: such an agent runs whole
  // clusters only (docs/databases.md, "Clusters across hosts").
  const pool = parseCidr(opts.nodeAddressPool ?? '127.79.0.0/16');
  const membersAcrossHosts = !!pool && pool.network >>> 24 !== 127;
  const metrics = createAgentMetrics(opts.registry);
  const dbGauge = metrics.databases;

  const changed = () => {
    for (const l of listeners) l();
  };

  const controller = (id: number): DatabaseController => {
    let c = controllers.get(id);
    if (!c) {
      c = new DatabaseController({
        id,
        agentId: opts.id,
        agentKey,
        stateDir: opts.stateDir,
        runtime: opts.runtime,
        runtimeKind: opts.runtimeKind,
        catalogue: opts.catalogue,
        logger: opts.logger,
        clock: opts.clock,
        nodeAddressPool: opts.nodeAddressPool ?? '127.79.0.0/16',
        takenAddresses: () => new Set([...controllers.values()].flatMap((x) => x.state?.addresses ?? [])),
        onChange: changed,
        metrics,
        extras,
      });
      controllers.set(id, c);
    }
    return c;
  };

  let extras: ControllerExtras | undefined;
  let extraHooks: ReturnType<NonNullable<AgentOptions['extras']>> | undefined;

  const agent: Agent = {
    stateDir: opts.stateDir,
    clock: opts.clock,
    logger: opts.logger,
    runtime: opts.runtime,
    metrics,
    async start() {
      await mkdir(join(opts.stateDir, 'databases'), { recursive: true, mode: 0o700 });
      extraHooks = opts.extras?.(agent);
      extras = extraHooks;
      for (const [kind, h] of Object.entries(extraHooks?.handlers ?? {})) if (h) ops.register(kind as OperationKind, h);
      for (const dir of readdirSync(join(opts.stateDir, 'databases'))) {
        if (/^\d+$/.test(dir) && existsSync(join(opts.stateDir, 'databases', dir, 'state.json'))) controller(Number(dir));
      }
      // Nodes labelled as ours whose database the agent has no state for are leftovers of an
      // interrupted create or delete: nothing may be orphaned.
      for (const n of await opts.runtime.list({ [LABEL_AGENT]: opts.id })) {
        const id = Number(n.labels[LABEL_DATABASE]);
        if (!controllers.has(id)) {
          log.warn({ node: n.name }, 'removing orphaned node');
          await opts.runtime.remove(n.name, { withData: true });
        }
      }
      if (existsSync(desiredFile)) {
        try {
          applyDesired(JSON.parse(readFileSync(desiredFile, 'utf8')) as AgentDesired__Output, false);
        } catch (err) {
          log.error({ err }, 'persisted desired state unreadable; waiting for the control plane');
        }
      }
      const every = opts.reconcileIntervalMs ?? 1000;
      // Wall time: the loop drives real servers; an injected clock only moves schedules.
      timer = systemClock.setInterval(() => void agent.reconcileNow(), every);
      void agent.reconcileNow();
    },
    setDesired(d) {
      applyDesired(d, true);
    },
    report() {
      return {
        appliedVersion: desired?.version ?? 0,
        // A database is reported once this run has looked at its servers: before that a report
        // would say "no member, primary down" of servers that never stopped, and the control plane
        // would take its endpoints away and call it failed (docs/agent.md, restarts). A deleted
        // database whose interrupted action still runs is reported until that action's sweep is
        // done: the control plane purges it (and may reuse its addresses) once it is not reported.
        databases: [...controllers.values()].filter((c) => (c.state || c.desired || (c.deleted && c.busy)) && (c.deleted || c.inspected)).map((c) => c.report()),
        operationResults: ops.results(),
        runtime: opts.runtimeKind,
        membersAcrossHosts,
        backupStore: opts.backupStore ?? '',
        engines: opts.catalogue.map((e) => ({ id: e.id, engine: e.engine, version: e.version, image: e.image ?? '', binary: e.binary ?? '' })),
      };
    },
    onChange(l) {
      listeners.push(l);
    },
    database: (id) => controllers.get(id),
    databases: () => [...controllers.values()],
    async reconcileNow() {
      try {
        await reconcileRound();
      } catch (err) {
        // A round that fails is retried by the next one; it must never take the agent down.
        log.error({ err }, 'reconcile round failed');
      }
    },
    controlPlaneConnected(connected) {
      if (connected) disconnectedSince = undefined;
      else disconnectedSince ??= opts.clock.now();
    },
    disconnectedSince: () => disconnectedSince,
    async close() {
      closed = true;
      timer?.cancel();
      await Promise.allSettled([...inflight]);
      await extraHooks?.close?.();
      for (const c of controllers.values()) await c.closeEndpoints();
      // The last desired state is on disk before close returns: whoever closes the agent may
      // remove its folder next, and a write still in flight would then fail (ENOENT on rename).
      await persisting;
    },
  };


  async function reconcileRound(): Promise<void> {
    if (closed || !desired) return;
    const round = Promise.all([...controllers.values()].map((c) => c.tick())).then(() => undefined);
    inflight.add(round);
    try {
      await round;
    } finally {
      inflight.delete(round);
    }
    for (const [id, c] of controllers) if (c.deleted && !c.busy) controllers.delete(id);
    extraHooks?.tick?.();
    const r = agent.report();
    const counts: Record<string, number> = {};
    for (const d of r.databases ?? []) counts[d.status ?? ''] = (counts[d.status ?? ''] ?? 0) + 1;
    dbGauge.reset();
    for (const [s, n] of Object.entries(counts)) dbGauge.set({ status: s }, n);
    const json = JSON.stringify({ ...r, databases: r.databases?.map((d) => ({ ...d, nodes: undefined })) });
    if (json !== lastReport) {
      lastReport = json;
      changed();
    }
  }

  const ops = createOperations({ host: agent, stateDir: opts.stateDir, logger: log });

  function applyDesired(d: AgentDesired__Output, persist: boolean): void {
    // An empty list would delete every database this agent runs, with its backups; that happens
    // only when the control plane says so (docs/security/grpc.md), never from a forged or
    // truncated message.
    if (d.databases.length === 0 && !d.deleteAllIntended && [...controllers.values()].some((c) => !c.deleted)) {
      metrics.desiredRefused.inc();
      log.error({ version: d.version, running: controllers.size }, 'refused a desired state that would delete every database (not marked delete_all_intended)');
      return;
    }
    desired = d;
    const want = new Set<number>();
    for (const db of d.databases) {
      want.add(db.id);
      const c = controller(db.id);
      c.setDesired(db);
    }
    // Deleted, not moved: a database fenced to move removes its objects in the store too.
    const deleted = new Set((d.deletedDatabases ?? []).map(Number));
    for (const [id, c] of controllers) {
      if (want.has(id)) continue;
      if (deleted.has(id)) c.deletedByControlPlane = true;
      c.setDesired(undefined);
    }
    ops.accept(d.operations);
    if (persist) {
      // One write at a time: two desired states close together shared one temporary file, and the
      // second rename failed (ENOENT) or the older state could land last.
      const text = JSON.stringify(d);
      persisting = persisting.then(async () => {
        await mkdir(opts.stateDir, { recursive: true, mode: 0o700 });
        // Every linroot password is in here: owner-only (docs/security/secrets.md).
        await writeFile(`${desiredFile}.tmp`, text, { mode: 0o600 });
        await rename(`${desiredFile}.tmp`, desiredFile);
      }).catch((err) => log.error({ err }, 'could not persist desired state'));
    }
    changed();
    void agent.reconcileNow();
  }

  return agent;
}

export type { Operation__Output, OperationResult };
