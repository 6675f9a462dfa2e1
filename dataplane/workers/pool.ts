import cluster, { type Worker } from 'node:cluster';
import { fileURLToPath } from 'node:url';
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue, type Registry } from 'prom-client';
import { withDataplaneHeapFlags } from '../../lib/node-flags.js';
import type { Clock, Timer } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { PreparedSnapshot, ProxyEngine } from '../engine.js';
import type { SnapshotInput } from '../config/validate.js';
import type { CounterDelta, HealthEvent, TelemetrySource } from '../telemetry/telemetry-source.js';
import type { TicketKeys } from '../runtime/ticket-keys.js';
import { SharedState } from './shared-state.js';
import { UdpGroups, udpPorts } from './udp-group.js';
import { DEFAULT_HEARTBEAT, HeartbeatWatch, type HeartbeatSettings, type ReplaceReason } from './heartbeat.js';
import { WORKER_SETTINGS_ENV, type FromWorker, type NodeVerdict, type ToWorker, type WorkerSettings } from './protocol.js';

/** Metrics only workers carry (traffic); every other series is the primary's own. */
const WORKER_METRICS = new Set([
  'fulcrum_dataplane_connections_total', 'fulcrum_dataplane_active_connections', 'fulcrum_dataplane_bytes_total',
  'fulcrum_dataplane_http_requests_total', 'fulcrum_dataplane_connections_refused_total', 'fulcrum_dataplane_open_connections',
  'fulcrum_dataplane_database_connections_total', 'fulcrum_dataplane_database_active_connections',
  'fulcrum_dataplane_database_refused_total', 'fulcrum_dataplane_database_member_errors_total',
  'fulcrum_dataplane_udp_relay_dropped_total', 'fulcrum_dataplane_udp_send_errors_total',
]);
const METRICS_TIMEOUT_MS = 5000;
const TIMED_OUT = 'worker did not answer';
/** A worker that dies sooner than this after its start is replaced after a pause (no crash loop). */
const QUICK_DEATH_MS = 2000;
/**
 * A prepared snapshot goes to the workers in parts of this many NodeBalancers, the primary
 * handing its event loop back between parts: serialising a whole state of 10,000 at once
 * would hold the primary's gRPC streams for more than a second (docs/dataplane.md, "Large states").
 */
const PART = 250;
const pause = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export interface WorkerPoolOptions {
  count: number;
  /** node:cluster's distribution: `rr` (the primary accepts and hands out) or `kernel` (workers accept). */
  distribution: 'rr' | 'kernel';
  settings: Omit<WorkerSettings, 'slot' | 'generation' | 'workers'>;
  /** The primary's engine (`bind: false`): validation, health checks and the health verdicts. */
  checker: ProxyEngine;
  registry: Registry;
  logger: Logger;
  clock: Clock;
  /** How long a replaced worker's connections may run on after a reload. */
  drainMs: number;
  /** The data plane's TLS ticket secret: every worker gets it, so tickets resume on any of them. */
  tickets: TicketKeys;
  /**
   * How long a worker may take to apply a snapshot; one that takes longer is taken for hung,
   * killed and replaced, and the answer to the control plane does not wait for it.
   */
  applyTimeoutMs: number;
  /** How often workers are pinged and how many missed intervals make one wedged (default 1 s x 5). */
  heartbeat?: HeartbeatSettings;
  /** A worker of the serving generation is being replaced, and why (the primary's metric). */
  onReplace?: (reason: ReplaceReason) => void;
}

interface Member {
  worker: Worker;
  slot: number;
  generation: number;
  ready: boolean;
  /** It said hello: its message handler is in place (earlier messages would be lost). */
  hello: boolean;
  draining: boolean;
  started: number;
  /** Set when the primary killed it: what the replacement is counted as. */
  killedFor?: ReplaceReason;
  settle: { resolve: () => void; reject: (e: Error) => void };
}

interface Pending {
  member: Member;
  resolve: (m: FromWorker) => void;
  reject: (e: Error) => void;
}

/**
 * The primary of a multi-process data plane (docs/dataplane.md, "Workers"): forks the workers,
 * forwards each snapshot to all of them and answers only when all applied it, pushes the
 * primary's health verdicts, keeps the state they must agree on (SharedState), sums their
 * counters and metrics, replaces a worker that dies, and on reload starts a new generation on
 * the same listeners before the old one drains.
 */
export class WorkerPool implements TelemetrySource {
  private readonly members = new Map<number, Member>();
  private readonly pending = new Map<number, Pending>();
  private readonly counters = new Map<number, CounterDelta>();
  private readonly shared: SharedState;
  private readonly udp: UdpGroups;
  private generation = 1;
  private seq = 0;
  private chain: Promise<unknown> = Promise.resolve();
  private verdicts: NodeVerdict[] = [];
  private closing = false;
  private readonly beats: HeartbeatWatch<number>;
  private beatTimer: Timer | undefined;

  constructor(private readonly o: WorkerPoolOptions) {
    cluster.schedulingPolicy = o.distribution === 'rr' ? cluster.SCHED_RR : cluster.SCHED_NONE;
    // A worker runs the same CLI, which sees it is a cluster worker (bin/commands.ts).
    cluster.setupPrimary({
      exec: fileURLToPath(new URL('../../bin/fulcrum.js', import.meta.url)), args: ['dataplane'], serialization: 'advanced',
      execArgv: withDataplaneHeapFlags(process.execArgv),
    });
    cluster.on('exit', (w, code, signal) => this.onExit(w, code, signal));
    this.udp = new UdpGroups(o.count);
    this.beats = new HeartbeatWatch(o.clock, o.heartbeat ?? DEFAULT_HEARTBEAT);
    this.shared = new SharedState(o.clock, (configId, nodeId) => {
      const status = o.checker.config(configId)?.nodes.get(nodeId)?.status;
      return status !== undefined && status !== 'DOWN';
    });
    o.tickets.onChange(() => {
      for (const m of this.members.values()) if (m.hello) this.send(m, { t: 'tickets', secret: o.tickets.secret() });
    });
    o.checker.onHealth((ev) => {
      if (ev.status === 'DOWN') this.shared.nodeDown(ev.configId, ev.nodeId);
      if (this.verdicts.length === 0) setImmediate(() => this.flushVerdicts());
      this.verdicts.push({ configId: ev.configId, nodeId: ev.nodeId, status: ev.status });
    });
  }

  /** Forks the workers and waits until each is ready. */
  async start(): Promise<void> {
    await Promise.all(Array.from({ length: this.o.count }, (_, slot) => this.fork(slot, this.generation)));
    this.beatTimer = this.o.clock.setInterval(() => this.heartbeat(), (this.o.heartbeat ?? DEFAULT_HEARTBEAT).intervalMs);
  }

  /** Whether traffic is carried: some ready worker that is not draining answered lately (pair mode's liveness). */
  serving(): boolean {
    for (const m of this.members.values()) if (m.ready && !m.draining && this.beats.answering(m.worker.id)) return true;
    return false;
  }

  /** Forwards a snapshot to every worker; resolves when all applied it, throws (NACK) when one refused it. */
  apply(snapshot: SnapshotInput): Promise<void> {
    const run = this.chain.then(() => this.applyNow(snapshot));
    this.chain = run.catch(() => undefined);
    return run;
  }

  /**
   * A new generation of workers on the same listeners; once every one of them serves the current
   * snapshot the old ones stop accepting and drain. Resolves when the old ones are told to drain.
   */
  async reload(): Promise<void> {
    const old = [...this.members.values()].filter((m) => !m.draining);
    const generation = ++this.generation;
    this.o.logger.info({ generation, workers: this.o.count }, 'reload: starting new workers');
    const fresh = await Promise.allSettled(Array.from({ length: this.o.count }, (_, slot) => this.fork(slot, generation)));
    const failed = fresh.find((r) => r.status === 'rejected');
    if (failed) {
      // The old generation keeps serving; the new one goes.
      for (const m of this.members.values()) if (m.generation === generation) this.stop(m, 0);
      this.generation = Math.max(...old.map((m) => m.generation), 1);
      throw new Error(`reload failed: ${(failed as PromiseRejectedResult).reason?.message ?? failed}`);
    }
    for (const m of old) this.stop(m, this.o.drainMs);
  }

  /** Workers (ready ones, of every generation still running). */
  workerPids(): { pid: number; slot: number; generation: number; draining: boolean }[] {
    return [...this.members.values()].map((m) => ({ pid: m.worker.process.pid ?? 0, slot: m.slot, generation: m.generation, draining: m.draining }));
  }

  onHealth(cb: (ev: HealthEvent) => void): () => void {
    return this.o.checker.onHealth(cb);
  }

  healthSnapshot(): HealthEvent[] {
    return this.o.checker.healthSnapshot();
  }

  drainCounters(): CounterDelta[] {
    const out = [...this.counters.values()];
    this.counters.clear();
    return out;
  }

  /** The data plane's /metrics: the primary's own series and the sum of the workers' traffic series. */
  async metrics(): Promise<string> {
    const own = (await this.o.registry.getMetricsAsJSON()).filter((m) => !WORKER_METRICS.has(m.name));
    const replies = await Promise.allSettled([...this.members.values()].filter((m) => m.hello).map((m) => this.request(m, { t: 'metrics', seq: 0 }, METRICS_TIMEOUT_MS)));
    const theirs = replies.flatMap((r) => (r.status === 'fulfilled' && r.value.t === 'metrics' ? [(r.value.metrics as MetricObjectWithValues<MetricValue<string>>[]).filter((m) => WORKER_METRICS.has(m.name))] : []));
    return AggregatorRegistry.aggregate([own, ...theirs]).metrics();
  }

  async close(): Promise<void> {
    this.closing = true;
    this.beatTimer?.cancel();
    const exits = [...this.members.values()].map((m) => new Promise<void>((resolve) => {
      if (m.worker.isDead()) return resolve();
      m.worker.once('exit', () => resolve());
      const kill = setTimeout(() => m.worker.process.kill('SIGKILL'), 5000);
      kill.unref();
      if (m.worker.isConnected()) m.worker.disconnect();
    }));
    await Promise.all(exits);
    this.udp.close();
  }

  private fork(slot: number, generation: number): Promise<void> {
    const settings: WorkerSettings = { ...this.o.settings, slot, generation, workers: this.o.count };
    const worker = cluster.fork({ [WORKER_SETTINGS_ENV]: JSON.stringify(settings) });
    return new Promise<void>((resolve, reject) => {
      const m: Member = { worker, slot, generation, ready: false, hello: false, draining: false, started: this.o.clock.now(), settle: { resolve, reject } };
      this.members.set(worker.id, m);
      worker.on('message', (msg: FromWorker) => this.onMessage(m, msg));
      worker.on('error', (err) => this.o.logger.warn({ err, slot }, 'worker channel error'));
    });
  }

  private onMessage(m: Member, msg: FromWorker): void {
    // Any message shows the worker's event loop runs, the pong being only the one it must send.
    this.beats.heard(m.worker.id);
    switch (msg.t) {
      case 'pong':
        return;
      case 'ready':
        m.hello = true;
        this.chain = this.chain.then(() => this.initialize(m));
        return;
      case 'applied':
      case 'metrics': {
        const p = this.pending.get(msg.seq);
        if (p === undefined) return;
        this.pending.delete(msg.seq);
        p.resolve(msg);
        return;
      }
      case 'admit':
        this.send(m, this.shared.admit(msg));
        return;
      case 'udp': {
        const socket = this.udp.socket(msg.ip, msg.port, m.slot);
        if (typeof socket === 'string') this.send(m, { t: 'udp', id: msg.id, error: socket });
        // The native handle travels with the message (child_process "dgram.Native"); the primary keeps its own.
        else if (m.worker.isConnected()) m.worker.send({ t: 'udp', id: msg.id } satisfies ToWorker, socket as Parameters<Worker['send']>[1]);
        return;
      }
      case 'passive':
        this.o.checker.passive(msg.configId, msg.nodeId, msg.reason);
        return;
      case 'counters':
        for (const d of msg.deltas) {
          const sum = this.counters.get(d.configId);
          if (sum === undefined) this.counters.set(d.configId, { ...d });
          else {
            sum.bytesIn += d.bytesIn;
            sum.bytesOut += d.bytesOut;
            sum.connections += d.connections;
            sum.atMs = Math.max(sum.atMs, d.atMs);
          }
        }
        return;
    }
  }

  /** A worker said it is up: give it everything served now and the health verdicts, then it counts. */
  private async initialize(m: Member): Promise<void> {
    try {
      // Before any https config: its first tickets are already under the shared secret.
      this.send(m, { t: 'tickets', secret: this.o.tickets.secret() });
      const state = this.o.checker.state();
      if (state.version > 0) {
        const [r] = await this.commit([m], state);
        if (r!.status === 'rejected') throw r!.reason;
        if (r!.value.t === 'applied' && r!.value.error) throw new Error(r!.value.error);
      }
      this.send(m, { t: 'health', events: this.verdictsNow() });
      m.ready = true;
      m.settle.resolve();
    } catch (err) {
      this.o.logger.error({ err, slot: m.slot }, 'a new worker could not apply the current snapshot');
      m.settle.reject(err as Error);
    }
  }

  private async applyNow(snapshot: SnapshotInput): Promise<void> {
    // Validated once, here, against the state every worker serves too; the workers commit it as it is.
    const prepared = await this.o.checker.prepare(snapshot);
    const targets = [...this.members.values()].filter((m) => m.ready && !m.draining);
    const replies = await this.commit(targets, prepared);
    // A worker that died (or hung and was replaced) meanwhile is not a refusal: its replacement
    // starts from the state this snapshot leads to.
    const errors = replies.flatMap((r) => (r.status === 'fulfilled' && r.value.t === 'applied' && r.value.error ? [r.value.error] : []));
    if (errors.length > 0) throw new FulcrumError('invalid_config', errors[0]!);
    await this.o.checker.commitPrepared(prepared);
    // Looked up in the primary's engine, not rebuilt from every config: a write costs what it changes.
    const checker = this.o.checker;
    this.shared.retain({ has: (id) => checker.servesNodeBalancer(id) }, { has: (id) => checker.config(id) !== undefined });
    if (this.udp.ports > 0) this.udp.retain(udpPorts(checker.state()));
  }

  /**
   * Sends a prepared snapshot to `targets` in parts, then asks each to commit it. A worker that
   * does not answer within the apply timeout is killed (its replacement starts from the current
   * state) and counts as gone.
   */
  private async commit(targets: Member[], p: PreparedSnapshot): Promise<PromiseSettledResult<FromWorker>[]> {
    const seqs = targets.map(() => ++this.seq);
    for (let i = 0; i < p.nodebalancers.length; i += PART) {
      const part = p.nodebalancers.slice(i, i + PART);
      targets.forEach((m, k) => this.send(m, { t: 'part', seq: seqs[k]!, nodebalancers: part }));
      await pause();
    }
    const head = { ...p, nodebalancers: [] };
    return Promise.allSettled(targets.map((m, k) => this.request(m, { t: 'commit', seq: seqs[k]!, prepared: head }, this.o.applyTimeoutMs).catch((err: Error) => {
      if (err.message === TIMED_OUT && !m.worker.isDead()) {
        this.o.logger.error({ slot: m.slot, pid: m.worker.process.pid, version: p.version, timeoutMs: this.o.applyTimeoutMs }, 'worker did not apply the snapshot in time; replacing it');
        m.killedFor = 'apply_timeout';
        m.worker.process.kill('SIGKILL');
      }
      throw err;
    })));
  }

  private verdictsNow(): NodeVerdict[] {
    return this.o.checker.healthSnapshot().map((ev) => ({ configId: ev.configId, nodeId: ev.nodeId, status: ev.status }));
  }

  private flushVerdicts(): void {
    const events = this.verdicts;
    this.verdicts = [];
    for (const m of this.members.values()) this.send(m, { t: 'health', events });
  }

  private request(m: Member, msg: Extract<ToWorker, { seq: number }>, timeoutMs = 0): Promise<FromWorker> {
    const seq = msg.seq > 0 ? msg.seq : ++this.seq;
    return new Promise((resolve, reject) => {
      const timer = timeoutMs > 0 ? this.o.clock.setTimeout(() => {
        this.pending.delete(seq);
        reject(new Error(TIMED_OUT));
      }, timeoutMs) : null;
      this.pending.set(seq, {
        member: m,
        resolve: (r) => {
          timer?.cancel();
          resolve(r);
        },
        reject: (e) => {
          timer?.cancel();
          reject(e);
        },
      });
      this.send(m, { ...msg, seq });
    });
  }

  /** Kills (SIGKILL: a stopped process acts on nothing softer) the silent workers, which onExit replaces; pings the rest. */
  private heartbeat(): void {
    for (const { key, silentMs } of this.beats.tick()) {
      const m = this.members.get(key);
      if (m === undefined || m.worker.isDead()) continue;
      this.o.logger.error({ slot: m.slot, pid: m.worker.process.pid, generation: m.generation, silentMs }, 'worker stopped answering; killing it and starting a replacement');
      m.killedFor = 'unresponsive';
      m.worker.process.kill('SIGKILL');
    }
    for (const m of this.members.values()) if (m.hello) this.send(m, { t: 'ping' });
  }

  private send(m: Member, msg: ToWorker): void {
    if (m.worker.isConnected()) m.worker.send(msg);
  }

  /** Tells a worker to drain (its connections get `deadlineMs`), which then exits. */
  private stop(m: Member, deadlineMs: number): void {
    m.draining = true;
    this.send(m, { t: 'drain', deadlineMs });
  }

  private onExit(w: Worker, code: number | null, signal: string | null): void {
    const m = this.members.get(w.id);
    if (m === undefined) return;
    this.members.delete(w.id);
    this.beats.forget(w.id);
    for (const [seq, p] of this.pending) {
      if (p.member !== m) continue;
      this.pending.delete(seq);
      p.reject(new Error('worker exited'));
    }
    if (!m.ready) m.settle.reject(new Error(`worker exited before it was ready (code ${code}, signal ${signal})`));
    if (this.closing || m.draining || m.generation !== this.generation) return;
    // Only this worker's connections are lost; the others and the listening sockets are untouched.
    this.o.logger.warn({ slot: m.slot, pid: w.process.pid, code, signal, reason: m.killedFor ?? 'exited' }, 'worker died; starting a replacement');
    this.o.onReplace?.(m.killedFor ?? 'exited');
    const delay = this.o.clock.now() - m.started < QUICK_DEATH_MS ? QUICK_DEATH_MS : 0;
    setTimeout(() => {
      if (this.closing || m.generation !== this.generation) return;
      this.fork(m.slot, m.generation).catch((err: Error) => this.o.logger.error({ err, slot: m.slot }, 'replacement worker failed'));
    }, delay);
  }
}
