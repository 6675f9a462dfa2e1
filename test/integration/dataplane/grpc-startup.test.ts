import { mkdtempSync, rmSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { startDataplane, type Dataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { loopback, startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';
import { startTestControlPlane, type TestControlPlane } from './grpc-control-plane.js';
import { config, freePort, node, nodebalancer } from './snapshot.js';
import { greeting, tcpConnect } from './clients.js';

const cleanup: Array<() => Promise<void> | void> = [];
afterEach(async () => {
  while (cleanup.length) await cleanup.pop()!();
});

async function setup() {
  const cp = await startTestControlPlane();
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-dp-'));
  const a = await startTcpBackend('a');
  const b = await startTcpBackend('b');
  cleanup.push(() => rmSync(stateDir, { recursive: true, force: true }), () => cp.close(), () => a.close(), () => b.close());
  return { cp, stateDir, a, b };
}

async function start(cp: TestControlPlane, stateDir: string, id = 'dp-1'): Promise<Dataplane> {
  const dp = await startDataplane({ insecureGrpc: true, id, region: 'lab', controlPlane: cp.address, stateDir, logger: silentLogger(), metricsPort: 0, telemetryIntervalMs: 200 });
  cleanup.push(() => dp.close());
  return dp;
}

function metricsOf(dp: Dataplane): Promise<string> {
  return fetch(`http://127.0.0.1:${dp.metricsPort}/metrics`).then((r) => r.text());
}

function tcpSnapshot(ip: string, port: number, backends: TcpBackend[]) {
  return nodebalancer(ip, [config(port, backends.map((b) => node(b.address)))]);
}

describe('data plane over real gRPC', () => {
  it('says hello, applies a tcp roundrobin snapshot, ACKs it and carries traffic', async () => {
    const { cp, stateDir, a, b } = await setup();
    const ip = loopback();
    const port = await freePort(ip);
    const nonce = cp.push({ version: 7, nodebalancers: [tcpSnapshot(ip, port, [a, b])] });
    const dp = await start(cp, stateDir);
    const hello = await waitFor(() => cp.acks.find((x) => x.responseNonce === ''), 10_000, 'hello');
    expect(hello).toMatchObject({ dataplaneId: 'dp-1', region: 'lab', versionApplied: 0 });
    const ack = await waitFor(() => cp.acks.find((x) => x.responseNonce === nonce), 10_000, 'ack');
    expect(ack.errorDetail).toBe('');
    expect(ack.versionApplied).toBe(7);
    const seen: string[] = [];
    for (let i = 0; i < 4; i++) seen.push(await greeting(ip, port));
    expect(seen.filter((s) => s === 'a')).toHaveLength(2);
    expect(seen.filter((s) => s === 'b')).toHaveLength(2);
    // check=none: the four connections saw both nodes, which are reported UP.
    await waitFor(() => cp.status.size === 2 && [...cp.status.values()].every((s) => s === 'UP'), 10_000, 'UP reports');
    // Counters flow as deltas.
    await waitFor(() => [...cp.totals.values()].some((t) => t.connections >= 4), 10_000, 'connection counters');
    const metrics = await fetch(`http://127.0.0.1:${dp.metricsPort}/metrics`).then((r) => r.text());
    expect(metrics).toMatch(/fulcrum_dataplane_config_version\{[^}]*\} 7/);
    expect(metrics).toMatch(/fulcrum_dataplane_connections_total\{[^}]*\} 4/);
    // All four connections are closed again: the gauge is back to zero.
    await waitFor(async () => /fulcrum_dataplane_active_connections\{[^}]*\} 0/.test(await fetch(`http://127.0.0.1:${dp.metricsPort}/metrics`).then((r) => r.text())), 5000, 'active 0');
  });

  it('NACKs a bad snapshot with the reason and keeps serving the last good one', async () => {
    const { cp, stateDir, a } = await setup();
    const ip = loopback();
    const port = await freePort(ip);
    const good = cp.push({ version: 1, nodebalancers: [tcpSnapshot(ip, port, [a])] });
    const dp = await start(cp, stateDir);
    await waitFor(() => cp.acks.find((x) => x.responseNonce === good), 10_000, 'ack');
    expect(await metricsOf(dp)).toMatch(/fulcrum_dataplane_control_plane_connected\{[^}]*\} 1/);
    const bad = nodebalancer(ip, [config(port, [node('not-an-address')])]);
    const nonce = cp.push({ version: 2, nodebalancers: [bad] });
    const nack = await waitFor(() => cp.acks.find((x) => x.responseNonce === nonce), 10_000, 'nack');
    expect(nack.errorDetail).toMatch(/nodes\[0\]\.address/);
    expect(await metricsOf(dp)).toMatch(/fulcrum_dataplane_snapshots_total\{result="nack"[^}]*\} 1/);
    expect(nack.versionApplied).toBe(1);
    expect(await greeting(ip, port)).toBe('a');
  });

  it('NACKs a snapshot whose port cannot be bound, without touching what serves', async () => {
    const { cp, stateDir, a } = await setup();
    const ip = loopback();
    const port = await freePort(ip);
    const good = cp.push({ version: 1, nodebalancers: [tcpSnapshot(ip, port, [a])] });
    await start(cp, stateDir);
    await waitFor(() => cp.acks.find((x) => x.responseNonce === good), 10_000, 'ack');
    // Someone else holds this address: the new listener cannot bind.
    const holder = await startTcpBackend('holder');
    cleanup.push(() => holder.close());
    const nonce = cp.push({ version: 2, nodebalancers: [tcpSnapshot(ip, port, [a]), tcpSnapshot(holder.ip, holder.port, [a])] });
    const nack = await waitFor(() => cp.acks.find((x) => x.responseNonce === nonce), 10_000, 'nack');
    expect(nack.errorDetail).toMatch(/cannot listen on/);
    expect(nack.versionApplied).toBe(1);
    expect(await greeting(ip, port)).toBe('a');
  });

  it('persists the last good snapshot and serves it at startup while the control plane is away', async () => {
    const { cp, stateDir, a } = await setup();
    const ip = loopback();
    const port = await freePort(ip);
    const nonce = cp.push({ version: 3, nodebalancers: [tcpSnapshot(ip, port, [a])] });
    const dp = await start(cp, stateDir, 'dp-persist');
    await waitFor(() => cp.acks.find((x) => x.responseNonce === nonce), 10_000, 'ack');
    await waitFor(() => existsSync(join(stateDir, 'dataplane-dp-persist.json')), 5_000, 'state file');
    await dp.close();
    await cp.close();
    // Control plane gone: a restarted data plane serves the persisted snapshot on its own.
    const dead = `${loopback()}:1`;
    const dp2 = await startDataplane({ insecureGrpc: true, id: 'dp-persist', region: 'lab', controlPlane: dead, stateDir, logger: silentLogger() });
    cleanup.push(() => dp2.close());
    expect(await greeting(ip, port)).toBe('a');
  });

  it('keeps serving when the control plane goes away and reconnects when it is back', async () => {
    const { cp, stateDir, a } = await setup();
    const ip = loopback();
    const port = await freePort(ip);
    const nonce = cp.push({ version: 5, nodebalancers: [tcpSnapshot(ip, port, [a])] });
    await start(cp, stateDir);
    await waitFor(() => cp.acks.find((x) => x.responseNonce === nonce), 10_000, 'ack');
    const [cpIp, cpPort] = cp.address.split(':');
    await cp.close();
    const held = await tcpConnect(ip, port);
    expect(await greeting(ip, port)).toBe('a');
    held.destroy();
    const cp2 = await startTestControlPlane(cpIp, Number(cpPort));
    cleanup.push(() => cp2.close());
    const hello = await waitFor(() => cp2.acks.find((x) => x.responseNonce === ''), 20_000, 'hello after reconnect');
    expect(hello.versionApplied).toBe(5);
  });
});
