import { afterAll, describe, expect, it } from 'vitest';
import { cpSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { startAgent, type RunningAgent } from '../../../agent/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { enrolHost } from '../../helpers/fleet.js';
import { joinFleet, renewCertificate } from '../../../lib/fleet-host.js';
import { hostIdentity, loadHostPki } from '../../../lib/pki.js';
import { api, until, within } from '../../helpers/lab.js';
import { ask, echoBackend } from '../../helpers/tcp.js';
import { freePort } from '../../helpers/tcp.js';

// The backend here is on loopback, which the product refuses by default (docs/security/api.md).
const loopbackBackends = ['127.0.61.0/24'];


/**
 * `--control-plane a:port,b:port`: a data plane and an agent given two replica addresses connect
 * to whichever answers, and when theirs goes away they move to the other while the data plane
 * keeps serving its last snapshot. The replicas here have copies of one SQLite state folder (same
 * CA, same enrolled hosts): enough for the hosts' side, which is what this tests.
 */
describe('a list of control-plane addresses', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'ops-replicas-cp-'));
  const dpState = mkdtempSync(join(tmpdir(), 'ops-replicas-dp-'));
  const agentState = mkdtempSync(join(tmpdir(), 'ops-replicas-agent-'));
  const stateB = join(mkdtempSync(join(tmpdir(), 'ops-replicas-cpb-')), 'state');
  let cp: ControlPlane | undefined;
  let replicaB: ControlPlane | undefined;
  let dp: Dataplane | undefined;
  let agent: RunningAgent | undefined;
  const backend = echoBackend('127.0.61.1', 'replica');

  afterAll(async () => {
    // Each step has its own bound: a CI run once spent the hook's whole 60 s in one of them.
    try {
      await within('agent.close', 15_000, agent?.close());
      await within('dp.close', 15_000, dp?.close());
      await within('replica A close', 10_000, cp?.close());
      await within('replica B close', 10_000, replicaB?.close());
      await within('backend close', 5_000, (await backend).close());
    } finally {
      for (const d of [stateDir, dpState, agentState, join(stateB, '..')]) rmSync(d, { recursive: true, force: true });
    }
  }, 60_000);

  const connectedTo = async (replica: ControlPlane) => {
    const call = api(replica.apiUrl, replica.adminToken);
    const dps = (await call('GET', '/v4/fulcrum/dataplanes')).body.data as { id: string; connected: boolean }[];
    const agents = (await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; connected: boolean }[];
    return dps.some((d) => d.id === 'ops-replicas-dp' && d.connected) && agents.some((a) => a.id === 'ops-replicas-agent' && a.connected);
  };

  it('connects to the replica that answers and moves to the other when theirs goes away, serving throughout', async () => {
    const [portA, portB, bootstrapA, bootstrapB] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const b = await backend;
    const start = (dir: string, grpcPort: number, bootstrapPort: number) =>
      startControlPlane({ stateDir: dir, apiPort: 0, grpcPort, bootstrapPort, logger: silentLogger(), backendNetworks: loopbackBackends });
    // Replica A answers; B is listed first and is down.
    cp = await start(stateDir, portA, bootstrapA);
    await enrolHost(cp, dpState, 'dataplane', 'ops-replicas-dp');
    await enrolHost(cp, agentState, 'agent', 'ops-replicas-agent');
    const list = `127.0.0.1:${portB},127.0.0.1:${portA}`;
    dp = await startDataplane({ controlPlane: list, stateDir: dpState, logger: silentLogger() });
    agent = await startAgent({ controlPlane: list, stateDir: agentState, runtime: 'process', logger: silentLogger(), heartbeatMs: 500 });
    await until('connected to A', () => connectedTo(cp!), 30_000, 100);

    const nb = await api(cp.apiUrl, cp.adminToken)('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'ops-replicas',
      configs: [{ port: 7300, protocol: 'tcp', nodes: [{ label: 'replica', address: `127.0.61.1:${b.port}` }] }],
    });
    expect(nb.status, JSON.stringify(nb.body)).toBe(200);
    await until('traffic through A', () => ask(nb.body.ipv4, 7300, 'a').then((s) => s === 'replica:a'), 20_000, 100);

    // A goes away; B comes up with a copy of A's state (same CA and hosts) on its own port.
    await cp.close();
    cp = undefined;
    expect(await ask(nb.body.ipv4, 7300, 'b')).toBe('replica:b');
    cpSync(stateDir, stateB, { recursive: true });
    const t0 = Date.now();
    replicaB = await start(stateB, portB, bootstrapB);
    await until('connected to B', () => connectedTo(replicaB!), 30_000, 50);
    const toB = Date.now() - t0;
    // Within the backoff cap (10.125 s) plus one attempt's margin.
    expect(toB).toBeLessThan(12_125);

    // Both replicas up, the hosts on B. B is killed: they are on A within 5 s, and the data plane
    // answered every connection in between (no listener closed).
    cp = await start(stateDir, portA, bootstrapA);
    expect(await connectedTo(replicaB)).toBe(true);
    let served = 0;
    let failures = 0;
    let looping = true;
    const loop = (async () => {
      while (looping) {
        await ask(nb.body.ipv4, 7300, 'x').then((s) => (s === 'replica:x' ? served++ : failures++), () => failures++);
        await new Promise((r) => setTimeout(r, 20));
      }
    })();
    await new Promise((r) => setTimeout(r, 200));
    const t1 = Date.now();
    // A started after the hosts moved to B, so it shows them connected only once they said hello to it.
    expect(await connectedTo(cp)).toBe(false);
    const onA = until('connected to A again', () => connectedTo(cp!), 30_000, 50);
    const closing = replicaB.close();
    await onA;
    const toA = Date.now() - t1;
    await closing;
    replicaB = undefined;
    await new Promise((r) => setTimeout(r, 200));
    looping = false;
    await loop;
    process.stdout.write(`hosts on B ${toB} ms after B started; back on A ${toA} ms after B was stopped; ${served} connections served meanwhile, ${failures} failed\n`);
    expect(toA).toBeLessThan(5_000);
    expect(failures).toBe(0);
    expect(served).toBeGreaterThan(5);
    // Its waits add up past the project's 60 s on a loaded machine; the budgets that matter
    // (toB, toA, no failed connection) are asserted above.
  }, 150_000);

  it('joins and renews through the first replica whose bootstrap endpoint answers', async () => {
    const joinState = mkdtempSync(join(tmpdir(), 'ops-replicas-join-'));
    const own = await startControlPlane({ stateDir: join(joinState, 'cp'), apiPort: 0, grpcPort: 0, bootstrapPort: 0, logger: silentLogger() });
    try {
      const port = own.grpcAddress.split(':').pop();
      // Nothing listens on 127.0.0.2 (the bootstrap endpoint is bound to 127.0.0.1): refused, next.
      const list = [`127.0.0.2:${port}`, own.grpcAddress];
      const token = (await own.context.fleet.createJoinToken({ role: 'agent', id: 'ops-replicas-joiner', region: '*' })).token;
      const id = await joinFleet({ controlPlane: list, token, role: 'agent', stateDir: join(joinState, 'host') });
      expect(id).toMatchObject({ role: 'agent', id: 'ops-replicas-joiner' });
      const current = loadHostPki(join(joinState, 'host'))!;
      const renewed = await renewCertificate({ controlPlane: list, stateDir: join(joinState, 'host'), current });
      expect(hostIdentity(renewed)).toEqual(hostIdentity(current));
      // A refusal is an answer: the token was used, and no other replica is asked to accept it.
      await expect(joinFleet({ controlPlane: [own.grpcAddress, `127.0.0.2:${port}`], token, role: 'agent', stateDir: join(joinState, 'again') })).rejects.toThrow(/already used/);
      // With no replica reachable the last error is reported.
      await expect(joinFleet({ controlPlane: [`127.0.0.2:${port}`, `127.0.0.3:${port}`], token, role: 'agent', stateDir: join(joinState, 'none') })).rejects.toThrow(/ECONNREFUSED 127\.0\.0\.3/);
    } finally {
      await own.close();
      rmSync(joinState, { recursive: true, force: true });
    }
  });

  it('refuses a malformed address list naming the bad entry', async () => {
    await expect(startDataplane({ controlPlane: '127.0.0.1:1,nonsense', stateDir: dpState, logger: silentLogger() })).rejects.toThrow(/"nonsense" is not host:port/);
    await expect(startAgent({ controlPlane: ' , ', stateDir: agentState, runtime: 'process', logger: silentLogger() })).rejects.toThrow(/at least one host:port/);
  });
});
