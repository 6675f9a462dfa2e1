import { randomUUID } from 'node:crypto';
import type { Registry } from 'prom-client';
import { Counter, Gauge, Histogram } from 'prom-client';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import { grpc, loadConfigProto, onStreamGone } from '../../lib/grpc.js';
import type { ConfigAck__Output } from '../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot } from '../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import type { NodeBalancerResources } from './nodebalancer-resources.js';
import type { ConfigStore } from './config-store.js';
import { configSource, type ConfigContent, type ConfigRound } from './config-source.js';
import type { RegionalEndpoint } from './endpoint-builder.js';
import type { DataplaneSources } from './dataplane-sources.js';
import { SnapshotCache, type Subscriber } from './snapshot-cache.js';
import { refuse, resolveClaim, type PeerAuth } from './peer-auth.js';
import type { PeerStreams } from './peer-streams.js';
import { RouteAcks } from './route-acks.js';

export interface ConfigServerDeps {
  /** What the push keeps in the store (push/config-store.ts). */
  store: ConfigStore;
  clock: Clock;
  logger: Logger;
  registry: Registry;
  /** Who a stream's peer is: its certificate (docs/security/grpc.md), or nobody when insecure. */
  peers: PeerAuth;
  /** Where open streams are registered, so that a removed data plane's are closed (peer-streams.ts). */
  streams: PeerStreams;
  /** Changes arriving within this window are sent as one snapshot. */
  coalesceMs?: number;
  /** This control-plane replica's id ('' with one control plane; docs/architecture.md, "The streams"). */
  replica?: string;
}

/**
 * ConfigService.Stream, the data planes' side of the push (docs/architecture.md, "The
 * streams"): a data plane says who it is, gets a full snapshot at once and after every change,
 * and answers each nonce with an ACK or a NACK, which become its status and metrics.
 */
export class ConfigPushServer {
  private readonly cache: SnapshotCache<ConfigRound, ConfigContent>;
  /** Every NodeBalancer built once, rebuilt when a write invalidates it. */
  private readonly resources: NodeBalancerResources;
  /** Where each data plane dials database members from (the members' PROXY header senders). */
  readonly sources: DataplaneSources;
  /** Which data planes have applied each database's routes (docs/databases.md, "When a database is active"). */
  readonly routes: RouteAcks;
  private endpoints: () => Promise<RegionalEndpoint[]> = async () => [];
  private sourcesChanged: () => void = () => undefined;
  private onAnswer: (dataplane: string, error: string | undefined) => Promise<void> = async () => undefined;
  private readonly log: Logger;
  private readonly gVersion: Gauge;
  private readonly cNacks: Counter;
  private readonly cRefused: Counter;

  constructor(private readonly d: ConfigServerDeps) {
    this.log = d.logger.child({ component: 'config-push' });
    this.sources = d.store.sources(() => this.sourcesChanged());
    this.resources = d.store.resources;
    const routes = (this.routes = new RouteAcks(d.store.status));
    const rounds = new Histogram({
      name: 'fulcrum_config_push_round_seconds', help: 'Time of one config push round: rebuild what changed, version, serialise and send to every data plane',
      buckets: [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5], registers: [d.registry],
    });
    this.cache = new SnapshotCache({
      source: configSource(this.resources, d.store.ledger, () => this.endpoints(), (eps, version) => routes.record(eps, version)), status: d.store.status, clock: d.clock, coalesceMs: d.coalesceMs, replica: d.replica,
      onError: (err) => this.log.error({ err }, 'config push round failed'),
      onRound: (ms) => rounds.observe(ms / 1000),
    });
    const cache = this.cache;
    new Gauge({
      name: 'fulcrum_dataplanes_connected', help: 'Data planes with an open config stream', registers: [d.registry],
      collect() {
        this.set(cache.size);
      },
    });
    this.gVersion = new Gauge({ name: 'fulcrum_dataplane_config_version_applied', help: 'Config version each data plane has ACKed', labelNames: ['dataplane'], registers: [d.registry] });
    this.cRefused = new Counter({ name: 'fulcrum_grpc_peers_refused_total', help: 'Streams refused because the peer certificate did not allow them', labelNames: ['service'], registers: [d.registry] });
    this.cNacks = new Counter({ name: 'fulcrum_dataplane_config_nacks_total', help: 'Snapshots rejected by data planes', labelNames: ['dataplane'], registers: [d.registry] });
  }

  register(server: grpc.Server): void {
    const proto = loadConfigProto();
    server.addService(proto.fulcrum.v1.ConfigService.service, { Stream: (call: any) => this.onStream(call) });
  }

  /**
   * Schedules a round for every connected data plane; bursts are coalesced. Database endpoints
   * and the data planes' sources are read every round; NodeBalancers are rebuilt only when
   * `nodeBalancerChanged` named them (or `all`, for a write whose NodeBalancers are unknown).
   */
  notifyChanged(all = false): void {
    if (all) this.resources.invalidateAll();
    this.cache.notifyChanged();
  }

  /** A committed write to this NodeBalancer (or its configs or nodes, or its deletion). */
  nodeBalancerChanged(id: number): void {
    this.resources.invalidate(id);
    this.cache.notifyChanged();
  }

  /** Records every open stream as connected again (docs/architecture.md, "The streams"). */
  reassert(): Promise<void> {
    return this.cache.reassert();
  }

  /** Reads what the store remembers of the data planes; once, before the streams are served. */
  start(): Promise<void> {
    return this.sources.load();
  }

  close(): Promise<void> {
    this.cache.close();
    return this.cache.idle();
  }

  /**
   * Serves database endpoints too (compose/databases.ts): `endpoints` is read every round;
   * `onSourcesChanged` hears of a data plane whose member-facing address is new or gone;
   * `onAnswer` hears each data plane's ACK (no error) or NACK (what it could not apply).
   */
  serveDatabaseEndpoints(
    endpoints: () => Promise<RegionalEndpoint[]>, onSourcesChanged: () => void,
    onAnswer?: (dataplane: string, error: string | undefined) => Promise<void>,
  ): void {
    this.endpoints = endpoints;
    this.sourcesChanged = onSourcesChanged;
    if (onAnswer) this.onAnswer = onAnswer;
    this.notifyChanged();
  }

  /** Forgets a removed data plane's address (its streams are closed by PeerStreams). */
  forget(id: string): Promise<void> {
    return this.sources.forget(id);
  }

  private onStream(call: grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>): void {
    let sub: Subscriber<ConfigContent> | undefined;
    let unregister: (() => void) | undefined;
    let peer: Awaited<ReturnType<PeerAuth['identify']>>;
    let refused = false;
    // Messages are handled one after another, in order, once the peer is known.
    let chain: Promise<void> = this.d.peers.identify(call, 'dataplane').then((p) => {
      peer = p;
    }, (err) => {
      refused = true;
      this.cRefused.inc({ service: 'config' });
      this.log.warn({ reason: (err as Error).message }, 'config stream refused');
      refuse(call, err);
    });
    call.on('data', (msg: ConfigAck__Output) => {
      chain = chain.then(() => this.onMessage(call, msg, { get: () => sub, set: (s) => (sub = s), registered: (u) => (unregister = u) }, peer, () => refused, () => (refused = true))).catch((err) => {
        this.log.error({ err }, 'config stream message could not be handled');
      });
    });
    onStreamGone(call, () => {
      chain = chain.then(async () => {
        unregister?.();
        if (sub && (await this.cache.disconnect(sub))) this.log.info({ dataplane: sub.id }, 'data plane disconnected');
      }).catch((err) => this.log.error({ err }, 'config stream end could not be recorded'));
    });
  }

  private async onMessage(
    call: grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>, msg: ConfigAck__Output, subRef: { get(): Subscriber<ConfigContent> | undefined; set(s: Subscriber<ConfigContent>): void; registered(unregister: () => void): void },
    peer: Awaited<ReturnType<PeerAuth['identify']>>, isRefused: () => boolean, markRefused: () => void,
  ): Promise<void> {
    if (isRefused()) return;
    const sub = subRef.get();
    if (!sub) {
      let claim: { id: string; region: string };
      try {
        claim = resolveClaim(peer, { id: msg.dataplaneId, region: msg.region }, { id: `anonymous-${randomUUID().slice(0, 8)}`, region: '*' });
      } catch (err) {
        markRefused();
        this.cRefused.inc({ service: 'config' });
        this.log.warn({ reason: (err as Error).message, claimed: msg.dataplaneId }, 'config stream refused');
        refuse(call, err);
        return;
      }
      const { id, region } = claim;
      subRef.registered(this.d.streams.add({ role: 'dataplane', id, serial: peer?.serial ?? '', end: (reason) => {
        markRefused();
        refuse(call, reason);
      } }));
      await this.sources.record(id, region, msg.endpointSource, call.getPeer());
      const fresh = await this.cache.connect(id, region, Number(msg.versionApplied), {
        send: ({ version, nonce, content }) => {
          call.write({ version, nonce, ...content });
          this.log.debug({ dataplane: id, version, incremental: content.incremental ?? false, nodebalancers: content.nodebalancers.length }, 'snapshot sent');
        },
        end: () => call.end(),
      });
      // A data plane that says it applies incremental snapshots gets them after its first full one.
      fresh.incremental = msg.incremental;
      subRef.set(fresh);
      this.log.info({ dataplane: id, region, version: msg.versionApplied, incremental: msg.incremental }, 'data plane connected');
      // One that already serves the current version gets an empty change, not the whole state
      // again (after a dropped stream, the whole state may be what it was busy applying).
      await this.cache.push(fresh, false, Number(msg.versionApplied));
      return;
    }
    const answered = await this.cache.answer(sub, msg.responseNonce, Number(msg.versionApplied), msg.errorDetail || undefined);
    if (!answered) return; // stale answer
    await this.onAnswer(sub.id, msg.errorDetail || undefined).catch((err: unknown) => this.log.error({ err, dataplane: sub.id }, 'a data plane answer was not recorded'));
    if (msg.errorDetail) {
      this.cNacks.inc({ dataplane: sub.id });
      this.log.warn({ dataplane: sub.id, error: msg.errorDetail, version: answered.version }, 'snapshot NACKed');
    } else {
      this.gVersion.set({ dataplane: sub.id }, Number(msg.versionApplied));
    }
  }
}
