import type { Server } from 'node:http';
import { Counter, Gauge, type Registry } from 'prom-client';
import { createRegistry, serveMetrics } from '../lib/metrics.js';
import { systemClock, type Clock } from '../lib/clock.js';
import { createLogger, type Logger } from '../lib/logger.js';
import { createProxyEngine } from './engine.js';
import { isIpv4 } from '../lib/ipv4.js';
import { registerEndpointMetrics } from './telemetry/endpoint-metrics.js';
import { SnapshotStore } from './config/persist.js';
import { makePrivate, restrictUmask } from '../lib/private-files.js';
import { ConfigClient } from './control/config-client.js';
import { TelemetryClient } from './telemetry/telemetry-client.js';
import { registerDataplaneMetrics } from './telemetry/metrics.js';
import { DEFAULT_NOFILE, raiseFdLimit } from './fd-limit.js';
import type { ConnLimitOptions } from './throttle/conn-limits.js';
import { prepareHostSecurity } from '../lib/fleet-host.js';
import { Keepalived, ensureNonlocalBind } from './vrrp/keepalived.js';
import type { VrrpSettings } from './vrrp/keepalived-config.js';
import { controlPlaneAddresses, type ControlPlaneTarget } from '../lib/control-plane-client.js';
import { WorkerPool } from './workers/pool.js';
import type { HeartbeatSettings } from './workers/heartbeat.js';
import { TICKET_ROTATE_MS, TicketKeys } from './runtime/ticket-keys.js';

export { createProxyEngine } from './engine.js';
export { registerDataplaneMetrics } from './telemetry/metrics.js';
export type { ProxyEngine, CounterDelta, HealthEvent, EngineOptions } from './engine.js';

export interface DataplaneOptions {
  /** Optional with a certificate, whose id and region are the only ones it may claim. */
  id?: string;
  region?: string;
  /** The control plane's gRPC server, host:port, or its replicas (`a:port,b:port` or a list). */
  controlPlane: ControlPlaneTarget;
  stateDir: string;
  /** A one-time join token (docs/security/grpc.md): join the fleet before starting. */
  join?: string;
  /** Plain gRPC without a certificate: only with the operator's explicit --insecure-grpc. */
  insecureGrpc?: boolean;
  metricsHost?: string;
  /** 0 = a random port, undefined = no metrics endpoint. */
  metricsPort?: number;
  logger?: Logger;
  registry?: Registry;
  /** Counter report interval (default 2 s). */
  telemetryIntervalMs?: number;
  clock?: Clock;
  /** Open-file limit to raise the process to at start (default 1,048,576, capped by fs.nr_open). */
  nofile?: number;
  /** Connection caps and timeouts; the descriptor budget comes from the limit in force. */
  limits?: Omit<ConnLimitOptions, 'fdLimit'>;
  /** Pair mode: hold the served addresses through keepalived with peers (docs/multi-host.md). */
  vrrp?: Omit<VrrpSettings, 'name'>;
  /**
   * The local address database endpoints dial members from, told to the control plane so that
   * the members accept PROXY headers from it (docs/security/mysql.md). Unset: the kernel's
   * choice, and the control plane takes the address the config stream comes from.
   */
  endpointSource?: string;
  /**
   * Worker processes sharing every listener (docs/dataplane.md, "Workers"). 1 (the default
   * here; the CLI's is the number of cores) = this process serves, as before.
   */
  workers?: number;
  /** node:cluster's connection distribution with several workers (default `kernel`, docs/dataplane.md "Workers"). */
  distribution?: 'rr' | 'kernel';
  /** After a reload, how long the old workers' open connections may run on (default 30 s). */
  drainMs?: number;
  /** How long a worker may take to apply a snapshot before it is replaced (default 60 s). */
  workerApplyTimeoutMs?: number;
  /** How often workers are pinged and after how many missed intervals one is replaced (default 1 s x 5). */
  workerHeartbeat?: HeartbeatSettings;
  /**
   * One listening socket per port on the wildcard address instead of one per NodeBalancer
   * address (docs/dataplane.md, "Wildcard listeners"): only when the data plane owns its ports
   * on every address of the host.
   */
  wildcardListeners?: boolean;
}

export interface Dataplane {
  close(): Promise<void>;
  metricsPort?: number;
  /** New workers on the same listeners, then the old ones drain; fails with a single process. */
  reload(): Promise<void>;
  /** The worker processes (empty with a single process). */
  workers(): { pid: number; slot: number; generation: number; draining: boolean }[];
}

/**
 * Composition root of the data plane: engine + persisted last good snapshot + config stream +
 * telemetry stream + /metrics. Serves the persisted snapshot before the control plane answers.
 * Every metric of the process is registered here, on the one registry.
 */
export async function startDataplane(opts: DataplaneOptions): Promise<Dataplane> {
  const controlPlane = controlPlaneAddresses(opts.controlPlane);
  // Private state (the persisted snapshot holds TLS keys, pki/ the host's key): umask 077,
  // folder 0700/0600 (docs/security/secrets.md).
  if (opts.endpointSource !== undefined && !isIpv4(opts.endpointSource)) throw new Error(`--endpoint-source must be an IPv4 address; got ${JSON.stringify(opts.endpointSource)}`);
  restrictUmask();
  makePrivate(opts.stateDir);
  const security = await prepareHostSecurity({
    stateDir: opts.stateDir, controlPlane, role: 'dataplane', join: opts.join, insecure: opts.insecureGrpc,
    logger: opts.logger ?? createLogger('dataplane'),
  });
  const me = security.identity;
  if (me && ((opts.id && opts.id !== me.id) || (opts.region && opts.region !== me.region))) {
    security.close();
    throw new Error(`this data plane's certificate is for ${me.id} in region ${me.region}; --id and --region must match it or be left out`);
  }
  const id = me?.id ?? opts.id ?? 'dataplane-1';
  const region = me?.region ?? opts.region ?? '*';
  const logger = (opts.logger ?? createLogger('dataplane')).child({ dataplane: id });
  const registry = opts.registry ?? createRegistry('dataplane');
  // Descriptors are what a flood of idle connections exhausts: take as many as the host allows
  // and budget client connections below that, keeping a reserve (docs/dataplane.md).
  const fds = raiseFdLimit(opts.nofile ?? DEFAULT_NOFILE);
  if (fds.error) logger.warn({ limit: fds.limit, error: fds.error }, 'could not raise the open-file limit');
  logger.info({ limit: fds.limit, raised: fds.raised }, 'open-file limit');
  const limits = { ...opts.limits, fdLimit: fds.limit };
  const multi = (opts.workers ?? 1) > 1;
  const replaced = new Counter({ name: 'fulcrum_dataplane_worker_replacements_total', help: 'Workers replaced: exited (crash, kill), unresponsive (missed the heartbeat), apply_timeout (hung in an apply)', labelNames: ['reason'], registers: [registry] });
  // With workers, this process's engine binds nothing: it validates, checks health once for the
  // data plane and decides node status; the workers carry the traffic.
  // One TLS ticket secret for the data plane, rotated here and handed to the workers (never to disk).
  const tickets = new TicketKeys();
  const rotation = (opts.clock ?? systemClock).setInterval(() => tickets.rotate(), TICKET_ROTATE_MS);
  const wildcard = opts.wildcardListeners ?? false;
  const engine = createProxyEngine({ logger, clock: opts.clock, limits, endpoints: { sourceAddress: opts.endpointSource }, bind: !multi, ticketKeys: tickets, wildcard });
  registerDataplaneMetrics(registry, engine);
  registerEndpointMetrics(registry, engine);
  const pool = multi
    ? new WorkerPool({
      count: opts.workers!, distribution: opts.distribution ?? 'kernel', checker: engine, registry, logger: logger.child({ component: 'workers' }),
      clock: opts.clock ?? systemClock, drainMs: opts.drainMs ?? 30_000, applyTimeoutMs: opts.workerApplyTimeoutMs ?? 60_000, tickets,
      settings: { limits: limits as Record<string, number | undefined>, endpointSource: opts.endpointSource, countersMs: 1000, wildcard },
      heartbeat: opts.workerHeartbeat, onReplace: (reason) => replaced.inc({ reason }),
    })
    : undefined;
  const apply = (snap: Parameters<typeof engine.apply>[0]) => (pool ? pool.apply(snap) : engine.apply(snap));
  await pool?.start();
  const store = new SnapshotStore(opts.stateDir, id);
  // Pair mode: listeners bind addresses a peer may hold (nonlocal bind), checked before anything.
  // A single process serves if its event loop answers at all; with workers, one must answer too.
  const serving = pool ? () => pool.serving() : () => true;
  const vrrp = opts.vrrp ? new Keepalived({ ...opts.vrrp, name: id, stateDir: opts.stateDir, logger: logger.child({ component: 'vrrp' }), serving }) : undefined;
  if (vrrp) ensureNonlocalBind(logger);

  try {
    const saved = await store.load();
    if (saved) {
      await apply(saved);
      logger.info({ version: engine.version() }, 'serving persisted snapshot');
    }
  } catch (err) {
    logger.error({ err }, 'persisted snapshot could not be applied; waiting for the control plane');
  }
  if (vrrp) {
    try {
      await vrrp.start(engine.addresses());
    } catch (err) {
      rotation.cancel();
      security.close();
      await pool?.close();
      await engine.close();
      throw err;
    }
  }

  const applies = new Counter({ name: 'fulcrum_dataplane_snapshots_total', help: 'Snapshots received from the control plane, by result (ack or nack)', labelNames: ['result'], registers: [registry] });
  const connected = new Gauge({ name: 'fulcrum_dataplane_control_plane_connected', help: '1 while the config stream is up', registers: [registry] });
  const config = new ConfigClient({
    id,
    region,
    endpointSource: opts.endpointSource ?? '',
    address: controlPlane,
    security,
    logger: logger.child({ component: 'config-client' }),
    version: () => engine.version(),
    apply: async (snap) => {
      try {
        await apply(snap);
      } catch (err) {
        applies.inc({ result: 'nack' });
        throw err;
      }
      applies.inc({ result: 'ack' });
      vrrp?.update(engine.addresses());
      await store.record(snap).catch((err) => logger.error({ err }, 'could not persist snapshot'));
    },
    onConnected: (up) => connected.set(up ? 1 : 0),
  });
  const telemetry = new TelemetryClient({
    id,
    address: controlPlane,
    security,
    source: pool ?? engine,
    logger: logger.child({ component: 'telemetry' }),
    intervalMs: opts.telemetryIntervalMs,
    clock: opts.clock,
  });
  security.onRenewed(() => {
    config.reconnect();
    telemetry.reconnect();
  });
  config.start();
  telemetry.start();

  let metricsServer: Server | undefined;
  if (opts.metricsPort !== undefined) {
    const scraped = pool ? { metrics: () => pool.metrics(), contentType: registry.contentType } : registry;
    metricsServer = await serveMetrics(scraped, opts.metricsHost ?? '127.0.0.1', opts.metricsPort);
  }
  const addr = metricsServer?.address();
  let closing: Promise<void> | undefined;
  return {
    metricsPort: addr && typeof addr === 'object' ? addr.port : undefined,
    reload: () => (pool ? pool.reload() : Promise.reject(new Error('reload needs --workers 2 or more: a single process has no one to hand its listeners to'))),
    workers: () => pool?.workerPids() ?? [],
    close() {
      closing ??= (async () => {
        // Addresses first: a peer takes them over while this one still drains.
        await vrrp?.stop();
        rotation.cancel();
        security.close();
        config.close();
        telemetry.close();
        await pool?.close();
        await engine.close();
        if (metricsServer) await new Promise<void>((r) => metricsServer!.close(() => r()));
      })();
      return closing;
    },
  };
}
