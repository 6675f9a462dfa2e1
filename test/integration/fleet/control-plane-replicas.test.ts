import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createServer } from 'node:net';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { startAgent, type RunningAgent } from '../../../agent/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { enrolHost } from '../../helpers/fleet.js';
import { api, until } from '../../helpers/lab.js';
import { ask, echoBackend } from '../../helpers/tcp.js';

// The backend here is on loopback, which the product refuses by default (docs/security/api.md).
const loopbackBackends = ['127.0.61.0/24'];

/** A port nothing listens on now (bound and released). */
function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address() as { port: number };
      s.close(() => resolve(port));
    });
  });
}

/**
 * `--control-plane a:port,b:port`: a data plane and an agent given two replica addresses connect
 * to whichever answers, and when theirs goes away they move to the other while the data plane
 * keeps serving its last snapshot. The replicas here take turns on one SQLite state folder (the
 * shared store of simultaneous replicas is PostgreSQL, docs/install.md).
 */
describe('a list of control-plane addresses', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'ops-replicas-cp-'));
  const dpState = mkdtempSync(join(tmpdir(), 'ops-replicas-dp-'));
  const agentState = mkdtempSync(join(tmpdir(), 'ops-replicas-agent-'));
  let cp: ControlPlane | undefined;
  let dp: Dataplane | undefined;
  let agent: RunningAgent | undefined;
  const backend = echoBackend('127.0.61.1', 'replica');

  afterAll(async () => {
    await agent?.close();
    await dp?.close();
    await cp?.close();
    await (await backend).close();
    for (const d of [stateDir, dpState, agentState]) rmSync(d, { recursive: true, force: true });
  });

  const connected = async () => {
    const call = api(cp!.apiUrl, cp!.adminToken);
    const dps = (await call('GET', '/v4/fulcrum/dataplanes')).body.data as { id: string; connected: boolean }[];
    const agents = (await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; connected: boolean }[];
    return dps.some((d) => d.id === 'ops-replicas-dp' && d.connected) && agents.some((a) => a.id === 'ops-replicas-agent' && a.connected);
  };

  it('connects to the replica that answers and moves to the other when it goes away', async () => {
    const [portA, portB, bootstrapPort] = [await freePort(), await freePort(), await freePort()];
    const b = await backend;
    // Replica A answers; B is listed first and is down.
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: portA, bootstrapPort, logger: silentLogger(), backendNetworks: loopbackBackends });
    enrolHost(cp, dpState, 'dataplane', 'ops-replicas-dp');
    enrolHost(cp, agentState, 'agent', 'ops-replicas-agent');
    const list = `127.0.0.1:${portB},127.0.0.1:${portA}`;
    dp = await startDataplane({ controlPlane: list, stateDir: dpState, logger: silentLogger() });
    agent = await startAgent({ controlPlane: list, stateDir: agentState, runtime: 'process', logger: silentLogger(), heartbeatMs: 500 });
    await until('connected to A', connected, 30_000, 100);

    const nb = await api(cp.apiUrl, cp.adminToken)('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'ops-replicas',
      configs: [{ port: 7300, protocol: 'tcp', nodes: [{ label: 'replica', address: `127.0.61.1:${b.port}` }] }],
    });
    expect(nb.status, JSON.stringify(nb.body)).toBe(200);
    await until('traffic through A', () => ask(nb.body.ipv4, 7300, 'a').then((s) => s === 'replica:a'), 20_000, 100);

    // A goes away; B comes up (same state, its own port).
    await cp.close();
    cp = undefined;
    expect(await ask(nb.body.ipv4, 7300, 'b')).toBe('replica:b');
    const t0 = Date.now();
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: portB, bootstrapPort, logger: silentLogger(), backendNetworks: loopbackBackends });
    await until('connected to B', connected, 30_000, 50);
    const moved = Date.now() - t0;
    process.stdout.write(`data plane and agent on replica B ${moved} ms after it started\n`);
    // Within the backoff cap (10.125 s) plus one attempt's margin.
    expect(moved).toBeLessThan(12_125);
    expect(await ask(nb.body.ipv4, 7300, 'c')).toBe('replica:c');
  });

  it('refuses a malformed address list naming the bad entry', async () => {
    await expect(startDataplane({ controlPlane: '127.0.0.1:1,nonsense', stateDir: dpState, logger: silentLogger() })).rejects.toThrow(/"nonsense" is not host:port/);
    await expect(startAgent({ controlPlane: ' , ', stateDir: agentState, runtime: 'process', logger: silentLogger() })).rejects.toThrow(/at least one host:port/);
  });
});
