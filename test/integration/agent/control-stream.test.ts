/**
 * The agent's control-plane stream over real gRPC: hello first, heartbeats, desired state
 * delivered, and a reconnect (jittered backoff) after the control plane goes away and comes back.
 */
import { afterAll, describe, expect, it } from 'vitest';
import { systemClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { insecureChannel } from '../../../lib/grpc.js';
import { createControlStream, type ControlStream } from '../../../agent/control-stream.js';
import type { AgentDesired__Output } from '../../../proto/gen/fulcrum/v1/AgentDesired.js';
import { desiredDb, startDriver, type Driver } from './control-plane-driver.js';

describe('agent control stream', () => {
  let driver: Driver | undefined;
  let stream: ControlStream | undefined;
  afterAll(async () => {
    await stream?.close();
    await driver?.close();
  });

  it('says hello, heartbeats, receives desired state and reconnects after the control plane restarts', async () => {
    driver = await startDriver();
    const target = driver.target;
    const received: AgentDesired__Output[] = [];
    stream = createControlStream({
      target, security: insecureChannel, agentId: 'cs-1', region: 'us-east', logger: silentLogger(), clock: systemClock, heartbeatMs: 100,
      observe: () => ({ appliedVersion: received.at(-1)?.version ?? 0, databases: [], operationResults: [], engines: [], runtime: 'process' }),
      onDesired: (d) => received.push(d),
    });
    await driver.waitFor(() => driver!.reports.find((r) => r.hello), 5000, 'hello');
    expect(driver.reports[0]!.hello).toBe(true);
    expect(driver.reports[0]!.agentId).toBe('cs-1');
    await driver.waitFor(() => driver!.reports.filter((r) => r.heartbeat).length >= 3, 5000, 'heartbeats');
    driver.setDatabases([desiredDb({ id: 9, hostPrimary: '127.78.0.1', hostSecondary: '127.78.0.2' })]);
    await driver.waitFor(() => received.some((d) => d.databases[0]?.id === 9), 5000, 'desired');
    expect(stream.connected).toBe(true);

    await driver.close();
    await new Promise((r) => setTimeout(r, 300));
    expect(stream.connected).toBe(false);
    // A new control plane on the same address: the agent finds it again by itself.
    const { loadAgentProto, grpc, serverOptions } = await import('../../../lib/grpc.js');
    const proto = loadAgentProto();
    const server = new grpc.Server(serverOptions);
    let hellos = 0;
    server.addService(proto.fulcrum.v1.AgentService.service, {
      Stream: (call: any) => {
        call.on('data', (r: any) => {
          if (r.hello) {
            hellos++;
            call.write({ version: 50, databases: [], operations: [] });
          }
        });
        call.on('end', () => call.end());
      },
    });
    await new Promise<void>((resolve, reject) => server.bindAsync(target, grpc.ServerCredentials.createInsecure(), (e) => (e ? reject(e) : resolve())));
    const t0 = Date.now();
    while (!received.some((d) => d.version === 50) && Date.now() - t0 < 15_000) await new Promise((r) => setTimeout(r, 50));
    expect(hellos).toBeGreaterThanOrEqual(1);
    expect(received.at(-1)!.version).toBe(50);
    await stream.close();
    stream = undefined;
    server.forceShutdown();
  });
});
