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

/** Keepalive settings shared by every stream so that a dead peer is noticed in seconds. */
export const channelOptions: grpc.ChannelOptions = {
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.max_receive_message_length': 256 * 1024 * 1024,
  'grpc.max_send_message_length': 256 * 1024 * 1024,
};

export const serverOptions: grpc.ServerOptions = {
  'grpc.keepalive_time_ms': 10_000,
  'grpc.keepalive_timeout_ms': 5_000,
  'grpc.keepalive_permit_without_calls': 1,
  'grpc.http2.min_ping_interval_without_data_ms': 5_000,
  'grpc.max_receive_message_length': 256 * 1024 * 1024,
  'grpc.max_send_message_length': 256 * 1024 * 1024,
};

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
