import { loadConfigProto, type grpc } from '../../lib/grpc.js';
import type { CounterDelta } from '../../dataplane/telemetry/telemetry-source.js';

/** One counter delta, as a data plane reports it. */
export type TrafficSample = CounterDelta;

/**
 * Reports traffic counters and node health to the control plane over its real gRPC telemetry
 * service, as a data plane does; resolves once the control plane has acknowledged the stream.
 */
export async function reportTelemetry(
  grpcAddress: string,
  /** mTLS credentials of a data plane whose id is `test-telemetry` (test/helpers/fleet.ts). */
  credentials: grpc.ChannelCredentials,
  r: { counters?: TrafficSample[]; health?: { nodebalancerId: number; configId: number; nodeId: number; status: 'UP' | 'DOWN' }[] },
): Promise<void> {
  const proto = loadConfigProto();
  const client = new proto.fulcrum.v1.TelemetryService(grpcAddress, credentials);
  try {
    await new Promise<void>((resolve, reject) => {
      const call = client.Report((err: grpc.ServiceError | null) => (err ? reject(err) : resolve()));
      call.write({
        dataplaneId: 'test-telemetry',
        counters: r.counters ?? [],
        health: (r.health ?? []).map((h) => ({ ...h, atMs: Date.now() })),
      });
      call.end();
    });
  } finally {
    client.close();
  }
}
