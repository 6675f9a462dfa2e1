import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { existsSync } from 'node:fs';
import * as grpc from '@grpc/grpc-js';
import * as protoLoader from '@grpc/proto-loader';
import type { ProtoGrpcType as ConfigProto } from '../proto/gen/config.js';
import type { ProtoGrpcType as AgentProto } from '../proto/gen/agent.js';

export { grpc };

/** Finds proto/ whether running from sources (tsx, vitest) or from dist/. */
function protoRoot(): string {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++) {
    const candidate = join(dir, 'proto', 'fulcrum');
    if (existsSync(candidate)) return join(dir, 'proto');
    dir = dirname(dir);
  }
  throw new Error('proto/ directory not found');
}

const loaderOptions: protoLoader.Options = {
  longs: Number,
  enums: String,
  defaults: true,
  oneofs: true,
  includeDirs: [],
};

function load<T>(file: string): T {
  const root = protoRoot();
  const def = protoLoader.loadSync(join(root, 'fulcrum', 'v1', file), { ...loaderOptions, includeDirs: [root] });
  return grpc.loadPackageDefinition(def) as unknown as T;
}

let configProto: ConfigProto | undefined;
let agentProto: AgentProto | undefined;

export function loadConfigProto(): ConfigProto {
  configProto ??= load<ConfigProto>('config.proto');
  return configProto;
}

export function loadAgentProto(): AgentProto {
  agentProto ??= load<AgentProto>('agent.proto');
  return agentProto;
}

/**
 * Message limits (docs/security/grpc.md). What the control plane accepts from a peer (ACKs,
 * telemetry batches, agent reports) is small, so it takes at most 4 MiB per message: a peer
 * cannot make it buffer hundreds of MiB. What a host accepts from the control plane is one whole
 * snapshot: about 12 KiB per NodeBalancer with a TLS config (chain + key + nodes), so 64 MiB
 * holds a region of several thousand TLS NodeBalancers.
 */
export const PEER_MESSAGE_MAX = 4 * 1024 * 1024;
export const SNAPSHOT_MESSAGE_MAX = 64 * 1024 * 1024;

/** Keepalive settings shared by every stream so that a dead peer is noticed in seconds. */
export const channelOptions: grpc.ChannelOptions = {
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
  // The server is recognised by its certificate's fulcrum:// identity, not by a host name; a fixed
  // TLS server name keeps an IP address out of SNI (RFC 6066).
  'grpc.ssl_target_name_override': 'fulcrum-control-plane',
  'grpc.max_receive_message_length': SNAPSHOT_MESSAGE_MAX,
  'grpc.max_send_message_length': PEER_MESSAGE_MAX,
};

export const serverOptions: grpc.ServerOptions = {
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  'grpc.max_receive_message_length': PEER_MESSAGE_MAX,
  'grpc.max_send_message_length': SNAPSHOT_MESSAGE_MAX,
};

/**
 * How a data plane or agent reaches the control plane: mutual TLS with its current certificate
 * (lib/fleet-host.ts), or plain gRPC only when the operator passed --insecure-grpc. `generation`
 * changes when the certificate is renewed, so clients rebuild their channel on the next stream
 * (lib/control-plane-client.ts).
 */
export interface ChannelSecurity {
  credentials(): grpc.ChannelCredentials;
  readonly generation: number;
}

export const insecureChannel: ChannelSecurity = { credentials: () => grpc.credentials.createInsecure(), generation: 0 };

/**
 * mTLS credentials for a host: trusts only the fleet CA, and accepts the server only if its
 * certificate names the control plane role (the fleet CA is private, so the URI identity stands
 * in for a host name the operator may reach by any address).
 */
export function mtlsCredentials(pki: { caPem: string; certPem: string; keyPem: string }, isControlPlane: (raw: Buffer) => boolean): grpc.ChannelCredentials {
  return grpc.credentials.createSsl(Buffer.from(pki.caPem), Buffer.from(pki.keyPem), Buffer.from(pki.certPem), {
    checkServerIdentity: (_host, cert) => (cert.raw && isControlPlane(cert.raw) ? undefined : new Error('the server is not the fleet control plane')),
  });
}

/**
 * Calls `gone` when a server-side stream ends for any reason (peer half-close, error,
 * cancellation, transport close). A half-close is answered with our own end so that the peer's
 * stream completes. `gone` may run more than once; callers make it idempotent.
 */
export function onStreamGone(call: { on(event: string, fn: (...args: any[]) => void): unknown; end(): void }, gone: () => void): void {
  call.on('end', () => {
    gone();
    call.end();
  });
  call.on('error', gone);
  call.on('cancelled', gone);
  call.on('close', gone);
}
