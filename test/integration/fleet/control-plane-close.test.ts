import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane } from '../../../control-plane/main.js';
import { channelOptions, loadAgentProto } from '../../../lib/grpc.js';
import { silentLogger } from '../../../lib/logger.js';
import { hostCredentials } from '../../helpers/fleet.js';
import { until } from '../../helpers/lab.js';

/**
 * A control plane that is stopped while a host keeps its stream open (a hung or hostile peer
 * that never ends its call) still stops promptly and closes the stream: grpc-js's graceful
 * shutdown waits for every call to end, so the push server must end its streams itself first.
 */
describe('stopping a control plane with a host still connected', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'cp-close-'));
  afterAll(() => rmSync(stateDir, { recursive: true, force: true }));

  it('ends promptly and closes the open stream', async () => {
    const cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, bootstrapPort: 0, logger: silentLogger() });
    const creds = await hostCredentials(cp, 'agent', 'close-peer', 'us-east');
    const client = new (loadAgentProto().fulcrum.v1.AgentService as any)(cp.grpcAddress, creds, channelOptions);
    const call = client.Stream();
    let received = 0;
    let ended: string | undefined;
    call.on('data', () => received++);
    call.on('error', (err: Error) => (ended ??= err.message));
    call.on('end', () => (ended ??= 'end'));
    call.write({ agentId: 'close-peer', region: 'us-east', atMs: Date.now(), runtime: 'process' });
    await until('the control plane answered the peer', () => received > 0, 20_000, 50);
    const t0 = Date.now();
    // The peer neither ends nor cancels its call.
    await cp.close();
    const took = Date.now() - t0;
    expect(took).toBeLessThan(10_000);
    await until('the peer saw its stream closed', () => ended, 10_000, 50);
    client.close();
  }, 60_000);
});
