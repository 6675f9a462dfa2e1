import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startDataplane } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { createRegistry } from '../../../lib/metrics.js';
import { loopback, startHttpBackend, startTcpBackend, waitFor } from '../../helpers/backends.js';
import { cleanup } from './engine-harness.js';
import { startTestControlPlane } from './grpc-control-plane.js';
import { config, freePort, node, nodebalancer } from './snapshot.js';
import { tcpConnect } from './clients.js';
import { get } from './http-client.js';

async function boot() {
  const cp = await startTestControlPlane();
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-dp-'));
  const registry = createRegistry('dataplane-test');
  const dp = await startDataplane({ insecureGrpc: true, id: 'dp-tel', region: 'lab', controlPlane: cp.address, stateDir, logger: silentLogger(), registry, metricsPort: 0, telemetryIntervalMs: 300 });
  cleanup.push(() => rmSync(stateDir, { recursive: true, force: true }), () => cp.close(), () => dp.close());
  return { cp, dp, registry };
}

describe('telemetry and metrics', () => {
  it('reports 50 MB through a config as ~50 MB of byte deltas, and connections', async () => {
    const { cp } = await boot();
    const sink = await startTcpBackend('sink', { onSocket: (s) => { s.on('data', () => undefined); s.on('end', () => s.end()); } });
    cleanup.push(() => sink.close());
    const ip = loopback();
    const port = await freePort(ip);
    const cfg = config(port, [node(sink.address)]);
    const nonce = cp.push({ version: 1, nodebalancers: [nodebalancer(ip, [cfg])] });
    await waitFor(() => cp.acks.find((a) => a.responseNonce === nonce), 10_000, 'ack');
    const total = 50 * 1024 * 1024;
    const s = await tcpConnect(ip, port);
    const block = Buffer.alloc(1024 * 1024, 7);
    for (let i = 0; i < 50; i++) if (!s.write(block)) await new Promise((r) => s.once('drain', r));
    s.end();
    await new Promise((r) => s.once('close', r));
    const id = cfg.id as number;
    await waitFor(() => (cp.totals.get(id)?.bytesIn ?? 0) >= total, 10_000, '50 MB reported');
    const t = cp.totals.get(id)!;
    expect(t.bytesIn).toBeGreaterThanOrEqual(total * 0.95);
    expect(t.bytesIn).toBeLessThanOrEqual(total * 1.05);
    expect(t.connections).toBe(1);
    // Deltas, not totals: several reports each carry a part.
    const parts = cp.reports.flatMap((r) => r.counters.filter((c) => c.configId === id));
    expect(parts.reduce((a, c) => a + c.bytesIn, 0)).toBe(t.bytesIn);
  });

  it('reports node health transitions within a second and the full set after reconnecting', async () => {
    const { cp } = await boot();
    const a = await startHttpBackend('a');
    cleanup.push(() => a.close());
    const ip = loopback();
    const port = await freePort(ip);
    const n = node(a.address);
    const cfg = config(port, [n], { protocol: 'http', check: 'connection', checkInterval: 2, checkTimeout: 1, checkAttempts: 1 });
    cp.push({ version: 1, nodebalancers: [nodebalancer(ip, [cfg])] });
    await waitFor(() => cp.status.get(n.id as number) === 'UP', 10_000, 'UP');
    // Passive failure: the report follows the transition at once.
    await a.kill();
    const t0 = Date.now();
    await get(`http://${ip}:${port}/`);
    await waitFor(() => cp.status.get(n.id as number) === 'DOWN', 2_000, 'DOWN report');
    expect(Date.now() - t0).toBeLessThan(1500);
  });

  it('exports prom-client metrics and drops a NodeBalancer\'s labels when it goes', async () => {
    const { cp, registry } = await boot();
    const a = await startHttpBackend('a');
    cleanup.push(() => a.close());
    const ip = loopback();
    const port = await freePort(ip);
    const nb = nodebalancer(ip, [config(port, [node(a.address)], { protocol: 'http' })]);
    const n1 = cp.push({ version: 1, nodebalancers: [nb] });
    await waitFor(() => cp.acks.find((x) => x.responseNonce === n1), 10_000, 'ack');
    for (let i = 0; i < 3; i++) await get(`http://${ip}:${port}/`);
    let text = await registry.metrics();
    const lbl = `nodebalancer_id="${nb.id}"`;
    expect(text).toMatch(new RegExp(`fulcrum_dataplane_http_requests_total\\{[^}]*${lbl}[^}]*class="2xx"[^}]*\\} 3`));
    expect(text).toMatch(new RegExp(`fulcrum_dataplane_bytes_total\\{[^}]*${lbl}[^}]*direction="out"`));
    expect(text).toMatch(new RegExp(`fulcrum_dataplane_node_up\\{[^}]*${lbl}[^}]*\\} 1`));
    expect(text).toMatch(/fulcrum_dataplane_config_version\{[^}]*\} 1/);
    const n2 = cp.push({ version: 2, nodebalancers: [] });
    await waitFor(() => cp.acks.find((x) => x.responseNonce === n2), 10_000, 'ack 2');
    text = await registry.metrics();
    expect(text).not.toContain(lbl);
    expect(text).toMatch(/fulcrum_dataplane_config_version\{[^}]*\} 2/);
  });
});
