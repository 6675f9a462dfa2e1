import { loadConfigProto, type grpc, type ChannelSecurity } from '../../lib/grpc.js';
import { attemptChannelOptions, controlPlaneClient, reconnectingStream, type ControlPlaneTarget, type ReconnectingStream, type StreamAttempt } from '../../lib/control-plane-client.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigSnapshot__Output } from '../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import type { ConfigAck } from '../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigServiceClient } from '../../proto/gen/fulcrum/v1/ConfigService.js';

export interface ConfigClientOptions {
  id: string;
  region: string;
  /** Sent in the hello: where database endpoints dial members from (empty: the stream's address). */
  endpointSource?: string;
  /** The control plane's replicas; the client moves to the next one when its stream is lost. */
  address: ControlPlaneTarget;
  /** mTLS with the data plane's certificate (or plain gRPC with --insecure-grpc). */
  security: ChannelSecurity;
  logger: Logger;
  /** Version being served now (sent in the hello and in NACKs). */
  version(): number;
  /** Applies a snapshot, whole or incremental; throws to NACK with the error's message. */
  apply(snapshot: ConfigSnapshot__Output): Promise<void>;
  onConnected?(connected: boolean): void;
}

/**
 * The data plane's side of ConfigService.Stream: says hello, applies each snapshot, ACKs or NACKs
 * it by nonce, and reconnects with jittered backoff for as long as it runs. Snapshots that arrive
 * while one is being applied are coalesced: a whole snapshot supersedes everything received
 * before it (xDS: a newer response supersedes older ones), while incremental ones queue behind it
 * and apply in order, each on top of the one before; only the last of a burst is answered.
 */
export class ConfigClient {
  private readonly stream: ReconnectingStream<grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output>>;
  /** Received and not applied yet, each with the stream it came on (its answer goes there). */
  private pending: { snap: ConfigSnapshot__Output; call: grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output> }[] = [];
  private applying = false;
  /** A stream to open once the apply in progress ends (see open). */
  private openAfterApply = false;

  constructor(private readonly o: ConfigClientOptions) {
    const proto = loadConfigProto();
    this.stream = reconnectingStream({
      client: controlPlaneClient(o.address, o.security, (address, creds) => new proto.fulcrum.v1.ConfigService(address, creds, attemptChannelOptions) as unknown as ConfigServiceClient),
      // The hello names the version served; while a (large, whole) apply runs that is still the
      // old one, and the control plane would send the whole state again. Wait for the apply, so
      // the hello names what it led to (docs/dataplane.md, "Large states").
      deferOpen: () => {
        if (this.applying) this.openAfterApply = true;
        return this.applying;
      },
      open: (channel, attempt) => this.open(channel, attempt),
      onGone: () => this.o.onConnected?.(false),
      onLost: ({ why, delay, address, next }) => this.o.logger.warn({ why, delay, address, next }, 'config stream lost; reconnecting'),
      // A plain (ref'd) timer on purpose: it keeps a data plane that has nothing to serve yet
      // alive while the control plane is away.
      unrefTimer: false,
    });
  }

  start(): void {
    this.stream.start();
  }

  /** Reopens the stream (after a certificate renewal: the new channel presents the new one). */
  reconnect(): void {
    this.stream.reconnect();
  }

  private open(channel: ConfigServiceClient, attempt: StreamAttempt): grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output> {
    const call = channel.Stream();
    let gotData = false;
    call.on('data', (snap: ConfigSnapshot__Output) => {
      if (!gotData) {
        gotData = true;
        this.o.logger.info({ address: attempt.address }, 'config stream connected');
        attempt.held();
        this.o.onConnected?.(true);
      }
      if (snap.incremental) this.pending.push({ snap, call });
      else this.pending = [{ snap, call }];
      void this.drain();
    });
    call.on('error', (e: Error) => attempt.lost(e.message));
    call.on('end', () => attempt.lost('stream ended'));
    // A new stream starts from a whole snapshot: nothing queued from the old one applies to it.
    this.pending = [];
    call.write({ dataplaneId: this.o.id, region: this.o.region, versionApplied: this.o.version(), responseNonce: '', endpointSource: this.o.endpointSource ?? '', incremental: true });
    return call;
  }

  private async drain(): Promise<void> {
    if (this.applying) return;
    this.applying = true;
    try {
      for (let next = this.pending.shift(); next; next = this.pending.shift()) {
        const { snap, call } = next;
        let ack: ConfigAck;
        try {
          await this.o.apply(snap);
          ack = { dataplaneId: this.o.id, region: this.o.region, versionApplied: this.o.version(), responseNonce: snap.nonce };
        } catch (e) {
          const detail = (e as Error).message || String(e);
          this.o.logger.warn({ version: snap.version, detail }, 'snapshot rejected (NACK)');
          ack = { dataplaneId: this.o.id, region: this.o.region, versionApplied: this.o.version(), responseNonce: snap.nonce, errorDetail: detail };
        }
        if (this.stream.call === call && this.pending.length === 0) call.write(ack);
      }
    } finally {
      this.applying = false;
      if (this.openAfterApply) {
        this.openAfterApply = false;
        this.stream.start();
      }
    }
  }

  close(): void {
    this.stream.close((call) => call.cancel());
  }
}
