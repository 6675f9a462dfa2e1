import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadConfigProto } from '../../lib/grpc.js';
import type { TelemetryReport__Output } from '../../proto/gen/fulcrum/v1/TelemetryReport.js';
import type { TelemetryAck } from '../../proto/gen/fulcrum/v1/TelemetryAck.js';
import type { NodeHealthService } from '../domain/nodebalancers/node-health-service.js';
import type { StatsService } from '../domain/nodebalancers/stats-service.js';
import { PeerRefused, type PeerAuth } from './peer-auth.js';
import type { PeerStreams } from './peer-streams.js';

export interface TelemetryServerDeps {
  health: NodeHealthService;
  stats: StatsService;
  clock: Clock;
  logger: Logger;
  /** Who the reporting data plane is: its certificate (docs/security/grpc.md), or nobody when insecure. */
  peers: PeerAuth;
  /** Where open report streams are registered, so that a removed data plane's are ended (peer-streams.ts). */
  streams: PeerStreams;
}

/**
 * TelemetryService.Report: the data planes' node health transitions and traffic counter deltas,
 * handed to the NodeBalancer domain (node status, and the 5-minute buckets behind `transfer`
 * and `/stats`). Nothing here touches the store.
 */
export class TelemetryServer {
  private readonly log: Logger;

  constructor(private readonly d: TelemetryServerDeps) {
    this.log = d.logger.child({ component: 'telemetry' });
  }

  register(server: grpc.Server): void {
    const proto = loadConfigProto();
    server.addService(proto.fulcrum.v1.TelemetryService.service, { Report: (call: any, cb: any) => this.onReport(call, cb) });
  }

  private onReport(call: grpc.ServerReadableStream<TelemetryReport__Output, TelemetryAck>, cb: grpc.sendUnaryData<TelemetryAck>): void {
    let peer: Awaited<ReturnType<PeerAuth['identify']>>;
    let answered = false;
    let unregister: (() => void) | undefined;
    const deny = (err: unknown) => {
      unregister?.();
      if (answered) return;
      answered = true;
      this.log.warn({ reason: (err as Error).message }, 'telemetry refused');
      cb({ code: grpc.status.PERMISSION_DENIED, details: err instanceof PeerRefused ? err.message : 'refused' });
    };
    // Reports are stored one after another, in the order they came, after the peer is known;
    // the answer goes once all of them are stored.
    let chain: Promise<void> = this.d.peers.identify(call, 'dataplane').then((p) => {
      peer = p;
      // A report stream stays open as long as its data plane likes: a removed one's is ended.
      if (p && !answered) unregister = this.d.streams.add({ role: 'dataplane', id: p.id, serial: p.serial, end: deny });
    }, deny);
    call.on('data', (r: TelemetryReport__Output) => {
      chain = chain.then(() => this.store(r, peer, deny, () => answered));
    });
    call.on('end', () => {
      void chain.then(() => {
        unregister?.();
        if (!answered) cb(null, {});
        answered = true;
      });
    });
    call.on('error', () => unregister?.());
    call.on('cancelled', () => unregister?.());
  }

  private async store(r: TelemetryReport__Output, peer: Awaited<ReturnType<PeerAuth['identify']>>, deny: (err: unknown) => void, answered: () => boolean): Promise<void> {
    if (answered()) return;
    // A report speaks for the data plane its certificate names, never another.
    if (peer && r.dataplaneId && r.dataplaneId !== peer.id) {
      deny(new PeerRefused(`the certificate is for ${peer.id}, not ${r.dataplaneId}`));
      return;
    }
    // The certificate's region bounds what it may report on (no certificate: --insecure-grpc).
    const region = peer?.region ?? '*';
    try {
      let skipped = 0;
      for (const h of r.health ?? []) {
        if (!(await this.d.health.report(Number(h.configId), Number(h.nodeId), h.status, region)) && (h.status === 'UP' || h.status === 'DOWN')) skipped++;
      }
      for (const c of r.counters ?? []) {
        const delta = { bytesIn: Number(c.bytesIn), bytesOut: Number(c.bytesOut), connections: Number(c.connections) };
        if (delta.bytesIn === 0 && delta.bytesOut === 0 && delta.connections === 0) continue;
        if (!(await this.d.stats.record(Number(c.nodebalancerId), Number(c.configId), Number(c.atMs) || this.d.clock.now(), delta, region))) skipped++;
      }
      if (skipped > 0) this.log.warn({ dataplane: peer?.id, region, skipped }, 'telemetry for NodeBalancers this data plane does not serve (or that no longer exist) ignored');
    } catch (err) {
      this.log.error({ err }, 'telemetry report could not be stored');
    }
  }
}
