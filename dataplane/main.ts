import type { Server } from 'node:http';
import { Counter, Gauge, type Registry } from 'prom-client';
import { createRegistry, serveMetrics } from '../lib/metrics.js';
import type { Clock } from '../lib/clock.js';
import { createLogger, type Logger } from '../lib/logger.js';
import { createProxyEngine } from './engine.js';
import { SnapshotStore } from './config/persist.js';
import { makePrivate, restrictUmask } from '../lib/private-files.js';
import { ConfigClient } from './control/config-client.js';
import { TelemetryClient } from './telemetry/telemetry-client.js';
import { registerDataplaneMetrics } from './telemetry/metrics.js';

export { createProxyEngine } from './engine.js';
export { registerDataplaneMetrics } from './telemetry/metrics.js';
export type { ProxyEngine, CounterDelta, HealthEvent, EngineOptions } from './engine.js';

export interface DataplaneOptions {
  id: string;
  region: string;
  /** host:port of the control plane's gRPC server. */
  controlPlane: string;
  stateDir: string;
  metricsHost?: string;
  /** 0 = a random port, undefined = no metrics endpoint. */
  metricsPort?: number;
  logger?: Logger;
  registry?: Registry;
  /** Counter report interval (default 2 s). */
  telemetryIntervalMs?: number;
  clock?: Clock;
}

export interface Dataplane {
  close(): Promise<void>;
  metricsPort?: number;
}

/**
 * Composition root of the data plane: engine + persisted last good snapshot + config stream +
 * telemetry stream + /metrics. Serves the persisted snapshot before the control plane answers.
 * Every metric of the process is registered here, on the one registry.
 */
export async function startDataplane(opts: DataplaneOptions): Promise<Dataplane> {
  const logger = (opts.logger ?? createLogger('dataplane')).child({ dataplane: opts.id });
  const registry = opts.registry ?? createRegistry('dataplane');
  const engine = createProxyEngine({ logger, clock: opts.clock });
  registerDataplaneMetrics(registry, engine);
  // Private state (the persisted snapshot holds TLS keys): umask 077, folder 0700/0600 (docs/security/secrets.md).
  restrictUmask();
  makePrivate(opts.stateDir);
  const store = new SnapshotStore(opts.stateDir, opts.id);

  try {
    const saved = await store.load();
    if (saved) {
      await engine.apply(saved);
      logger.info({ version: engine.version() }, 'serving persisted snapshot');
    }
  } catch (err) {
    logger.error({ err }, 'persisted snapshot could not be applied; waiting for the control plane');
  }

  const applies = new Counter({ name: 'fulcrum_dataplane_snapshots_total', help: 'Snapshots received from the control plane, by result (ack or nack)', labelNames: ['result'], registers: [registry] });
  const connected = new Gauge({ name: 'fulcrum_dataplane_control_plane_connected', help: '1 while the config stream is up', registers: [registry] });
  const config = new ConfigClient({
    id: opts.id,
    region: opts.region,
    address: opts.controlPlane,
    logger: logger.child({ component: 'config-client' }),
    version: () => engine.version(),
    apply: async (snap) => {
      try {
        await engine.apply(snap);
      } catch (err) {
        applies.inc({ result: 'nack' });
        throw err;
      }
      applies.inc({ result: 'ack' });
      await store.save(snap).catch((err) => logger.error({ err }, 'could not persist snapshot'));
    },
    onConnected: (up) => connected.set(up ? 1 : 0),
  });
  const telemetry = new TelemetryClient({
    id: opts.id,
    address: opts.controlPlane,
    source: engine,
    logger: logger.child({ component: 'telemetry' }),
    intervalMs: opts.telemetryIntervalMs,
    clock: opts.clock,
  });
  config.start();
  telemetry.start();

  let metricsServer: Server | undefined;
  if (opts.metricsPort !== undefined) {
    metricsServer = await serveMetrics(registry, opts.metricsHost ?? '127.0.0.1', opts.metricsPort);
  }
  const addr = metricsServer?.address();
  let closing: Promise<void> | undefined;
  return {
    metricsPort: addr && typeof addr === 'object' ? addr.port : undefined,
    close() {
      closing ??= (async () => {
        config.close();
        telemetry.close();
        await engine.close();
        if (metricsServer) await new Promise<void>((r) => metricsServer!.close(() => r()));
      })();
      return closing;
    },
  };
}
