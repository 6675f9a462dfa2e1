import { Registry } from 'prom-client';
import { createLogger } from '../../lib/logger.js';
import { createProxyEngine } from '../engine.js';
import { TicketKeys } from '../runtime/ticket-keys.js';
import type { NodeBalancerSpec } from '../config/model.js';
import { registerDataplaneMetrics } from '../telemetry/metrics.js';
import { registerEndpointMetrics } from '../telemetry/endpoint-metrics.js';
import { AdmissionClient } from './admission-client.js';
import type { UdpHandle } from './udp-group.js';
import { WORKER_SETTINGS_ENV, type FromWorker, type ToWorker, type WorkerSettings } from './protocol.js';

const HANDOFF_GRACE_MS = 2000;

/**
 * One worker of a multi-process data plane (docs/dataplane.md, "Workers"): an engine whose
 * listeners share the primary's sockets, which applies what the primary forwards, takes node
 * health from it, asks it at accept where the workers must agree, and sends it counters and
 * metrics. The primary owns the control-plane streams; a worker only ever talks to it.
 */
export function runDataplaneWorker(): void {
  const settings = JSON.parse(process.env[WORKER_SETTINGS_ENV] ?? '{}') as WorkerSettings;
  const logger = createLogger('dataplane').child({ worker: settings.slot, generation: settings.generation });
  const send = (m: FromWorker, sent?: () => void): void => {
    if (process.connected) process.send!(m, undefined, undefined, sent);
    else sent?.();
  };
  const admission = new AdmissionClient(send);
  // udp listeners read this slot's socket of each port's reuseport group, which the primary holds.
  const udpAsked = new Map<number, { resolve: (h: UdpHandle) => void; reject: (e: Error) => void }>();
  let udpNext = 0;
  const udpSocket = (ip: string, port: number): Promise<UdpHandle> => new Promise((resolve, reject) => {
    const id = ++udpNext;
    udpAsked.set(id, { resolve, reject });
    send({ t: 'udp', id, ip, port });
  });
  // Replaced by the primary's secret before the first snapshot (the primary sends it first).
  const tickets = new TicketKeys();
  const engine = createProxyEngine({
    logger,
    limits: { ...settings.limits, udpShare: settings.workers },
    endpoints: { sourceAddress: settings.endpointSource },
    remoteHealth: { passive: (configId, nodeId, reason) => send({ t: 'passive', configId, nodeId, reason }) },
    shared: admission,
    udpSocket,
    ticketKeys: tickets,
    wildcard: settings.wildcard,
  });
  // No default process metrics: the primary's are the data plane's own (docs/dataplane.md).
  const registry = new Registry();
  registry.setDefaultLabels({ process: 'dataplane' });
  registerDataplaneMetrics(registry, engine);
  registerEndpointMetrics(registry, engine);

  const pushCounters = (): void => {
    const deltas = engine.drainCounters();
    if (deltas.length > 0) send({ t: 'counters', deltas });
  };
  const counters = setInterval(pushCounters, settings.countersMs);
  counters.unref();

  // NodeBalancers of the snapshot being sent, by its sequence number, until its commit.
  const parts = new Map<number, NodeBalancerSpec[]>();
  process.on('message', (m: ToWorker, handle?: UdpHandle) => {
    switch (m.t) {
      case 'ping':
        // Answered from this event loop: a worker whose loop is stuck does not answer and is replaced.
        send({ t: 'pong' });
        return;
      case 'part': {
        const got = parts.get(m.seq);
        if (got === undefined) parts.set(m.seq, [...m.nodebalancers]);
        else for (const nb of m.nodebalancers) got.push(nb);
        return;
      }
      case 'commit': {
        const nodebalancers = parts.get(m.seq) ?? [];
        parts.delete(m.seq);
        engine.commitPrepared({ ...m.prepared, nodebalancers }).then(
          () => send({ t: 'applied', seq: m.seq }),
          (err: Error) => send({ t: 'applied', seq: m.seq, error: err.message || String(err) }),
        );
        return;
      }
      case 'health':
        engine.setHealth(m.events);
        return;
      case 'tickets':
        try {
          tickets.set(m.secret);
        } catch (err) {
          logger.error({ err }, 'ticket secret refused');
        }
        return;
      case 'udp': {
        const w = udpAsked.get(m.id);
        udpAsked.delete(m.id);
        if (w === undefined) return;
        if (m.error === undefined && handle !== undefined) w.resolve(handle);
        else w.reject(Object.assign(new Error(m.error ?? 'no socket'), { code: m.error }));
        return;
      }
      case 'admitted':
        admission.answer(m);
        return;
      case 'metrics':
        registry.getMetricsAsJSON().then((metrics) => send({ t: 'metrics', seq: m.seq, metrics }), () => send({ t: 'metrics', seq: m.seq, metrics: [] }));
        return;
      case 'drain': {
        logger.info({ deadlineMs: m.deadlineMs }, 'draining');
        // The primary may have handed this worker a connection before it learnt that the
        // listeners closed; such a hand-off is answered "not accepted" (the primary gives it to
        // another worker) only while the channel is open, so it stays open for a grace time
        // (real time: it waits on the primary's IPC, not on anything the data plane schedules).
        const grace = new Promise((r) => setTimeout(r, HANDOFF_GRACE_MS));
        void Promise.all([engine.drain(m.deadlineMs), grace]).then(() => {
          clearInterval(counters);
          logger.info('drained');
          // The last counters reach the primary before the channel closes.
          send({ t: 'counters', deltas: engine.drainCounters() }, () => process.disconnect());
        });
        return;
      }
    }
  });
  // The primary is gone (it stopped or crashed): nothing can tell this worker what to serve.
  process.on('disconnect', () => process.exit(0));
  for (const sig of ['SIGTERM', 'SIGINT', 'SIGHUP', 'SIGUSR2'] as const) {
    // Signals to the process group are the primary's to handle; it stops workers itself.
    process.on(sig, () => undefined);
  }
  send({ t: 'ready' });
}
