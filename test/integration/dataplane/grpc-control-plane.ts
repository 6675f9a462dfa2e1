import { grpc, loadConfigProto, serverOptions } from '../../../lib/grpc.js';
import type { ConfigAck__Output } from '../../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot } from '../../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import type { TelemetryReport__Output } from '../../../proto/gen/fulcrum/v1/TelemetryReport.js';
import { loopback } from '../../helpers/backends.js';

/**
 * A real @grpc/grpc-js ConfigService + TelemetryService server for data-plane tests: records
 * hellos, ACK/NACKs and telemetry, and pushes snapshots to connected data planes.
 */
export interface TestControlPlane {
  address: string;
  acks: ConfigAck__Output[];
  reports: TelemetryReport__Output[];
  /** Latest status per node id, from telemetry. */
  status: Map<number, string>;
  /** Summed counter deltas per config id. */
  totals: Map<number, { bytesIn: number; bytesOut: number; connections: number }>;
  streams(): number;
  /** Sends a snapshot to every connected data plane (and to those connecting later); returns its nonce. */
  push(snapshot: Omit<ConfigSnapshot, 'nonce'>): string;
  close(): Promise<void>;
}

export async function startTestControlPlane(ip = loopback(), port = 0): Promise<TestControlPlane> {
  const proto = loadConfigProto();
  const server = new grpc.Server(serverOptions);
  const calls = new Set<grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>>();
  let latest: ConfigSnapshot | null = null;
  let n = 0;
  const state: TestControlPlane = {
    address: '',
    acks: [],
    reports: [],
    status: new Map(),
    totals: new Map(),
    streams: () => calls.size,
    push(snapshot) {
      const nonce = `n${++n}`;
      latest = { ...snapshot, nonce };
      for (const c of calls) c.write(latest);
      return nonce;
    },
    async close() {
      // Force: a data plane's telemetry stream never ends on its own.
      server.forceShutdown();
    },
  };
  server.addService(proto.fulcrum.v1.ConfigService.service, {
    Stream(call: grpc.ServerDuplexStream<ConfigAck__Output, ConfigSnapshot>) {
      calls.add(call);
      call.on('data', (ack: ConfigAck__Output) => {
        state.acks.push(ack);
        if (ack.responseNonce === '' && latest) call.write(latest);
      });
      const gone = () => calls.delete(call);
      call.on('end', () => { gone(); call.end(); });
      call.on('error', gone);
      call.on('cancelled', gone);
    },
  });
  server.addService(proto.fulcrum.v1.TelemetryService.service, {
    Report(call: grpc.ServerReadableStream<TelemetryReport__Output, unknown>, cb: grpc.sendUnaryData<unknown>) {
      call.on('data', (r: TelemetryReport__Output) => {
        state.reports.push(r);
        for (const h of r.health) state.status.set(h.nodeId, h.status);
        for (const c of r.counters) {
          const t = state.totals.get(c.configId) ?? { bytesIn: 0, bytesOut: 0, connections: 0 };
          t.bytesIn += c.bytesIn;
          t.bytesOut += c.bytesOut;
          t.connections += c.connections;
          state.totals.set(c.configId, t);
        }
      });
      call.on('end', () => cb(null, {}));
      call.on('error', () => undefined);
    },
  });
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`${ip}:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) => (err ? reject(err) : resolve(p))),
  );
  state.address = `${ip}:${bound}`;
  return state;
}
