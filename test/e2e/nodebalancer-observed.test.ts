import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer as createHttp, type Server as HttpServer } from 'node:http';
import { createConnection, createServer as createNet, type Server as NetServer, type Socket } from 'node:net';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { api, runFulcrum, startLab, until, type RunningLab } from '../helpers/lab.js';

// What users read back through the API about real traffic, end to end through the lab:
// node status / nodes_status from health checks (issue 4 acceptance 2) and transfer / stats
// from counted bytes, across a control-plane restart (issue 5 acceptance 5).

function healthServer(host: string, port = 0): Promise<{ server: HttpServer; port: number; sockets: Set<Socket> }> {
  const sockets = new Set<Socket>();
  const server = createHttp((_req, res) => res.writeHead(200, { 'content-type': 'text/plain' }).end(`ok from ${host}\n`));
  server.on('connection', (s) => {
    sockets.add(s);
    s.on('close', () => sockets.delete(s));
  });
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve({ server, port: (server.address() as { port: number }).port, sockets }));
  });
}

async function kill(b: { server: HttpServer; sockets: Set<Socket> }): Promise<void> {
  const closed = new Promise((r) => b.server.close(r));
  for (const s of b.sockets) s.destroy();
  await closed;
}

describe('NodeBalancer state observed through the API', () => {
  let lab: RunningLab;
  let call: ReturnType<typeof api>;
  const cleanups: (() => unknown)[] = [];

  beforeAll(async () => {
    lab = await startLab();
    call = api(lab.info.apiUrl, lab.info.adminToken);
  });
  afterAll(async () => {
    for (const c of cleanups.reverse()) await c();
    await lab?.stop();
  });

  it('shows a killed backend DOWN within interval x attempts + timeout, and UP again when it returns', async () => {
    const a = await healthServer('127.0.8.1');
    let b = await healthServer('127.0.8.2');
    cleanups.push(() => kill(a), () => kill(b));
    const created = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'health-nb',
      configs: [{
        port: 7201, protocol: 'http', check: 'http', check_path: '/', check_interval: 2, check_timeout: 1, check_attempts: 2,
        check_passive: false,
        nodes: [{ label: 'a-node', address: `127.0.8.1:${a.port}` }, { label: 'b-node', address: `127.0.8.2:${b.port}` }],
      }],
    });
    expect(created.status).toBe(200);
    const nbId = created.body.id;
    const cfg = (await call('GET', `/v4/nodebalancers/${nbId}/configs`)).body.data[0];
    const nodesUrl = `/v4/nodebalancers/${nbId}/configs/${cfg.id}/nodes`;
    const statuses = async () => Object.fromEntries((await call('GET', nodesUrl)).body.data.map((n: any) => [n.label, n.status]));

    await until('both nodes UP in the API', async () => {
      const s = await statuses();
      return s['a-node'] === 'UP' && s['b-node'] === 'UP';
    }, 20_000);
    expect((await call('GET', `/v4/nodebalancers/${nbId}/configs/${cfg.id}`)).body.nodes_status).toEqual({ up: 2, down: 0 });

    const killedAt = Date.now();
    await kill(b);
    await until('b-node DOWN in the API', async () => (await statuses())['b-node'] === 'DOWN', 20_000);
    // interval 2 s x attempts 2 + timeout 1 s = 5 s to detect, plus up to 2 s to report.
    expect(Date.now() - killedAt).toBeLessThan(7_000 + 1_000);
    expect((await statuses())['a-node']).toBe('UP');
    expect((await call('GET', `/v4/nodebalancers/${nbId}/configs/${cfg.id}`)).body.nodes_status).toEqual({ up: 1, down: 1 });

    b = await healthServer('127.0.8.2', b.port);
    await until('b-node UP again', async () => (await statuses())['b-node'] === 'UP', 20_000);
  });

  let restarted: ChildProcess | undefined;
  afterAll(() => restarted?.kill('SIGTERM'));

  it('counts 50 MB into transfer and /stats, and keeps them across a control-plane restart', async () => {
    const size = 50 * 1024 * 1024;
    const chunk = Buffer.alloc(1024 * 1024, 7);
    const source: NetServer = createNet((sock) => {
      // Streams 50 MB to whoever connects, then closes.
      let sent = 0;
      const pump = () => {
        while (sent < size) {
          sent += chunk.length;
          if (!sock.write(chunk)) return void sock.once('drain', pump);
        }
        sock.end();
      };
      sock.on('error', () => undefined);
      pump();
    });
    await new Promise<void>((r) => source.listen(0, '127.0.8.3', () => r()));
    cleanups.push(() => new Promise((r) => source.close(r)));
    const created = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'transfer-nb',
      configs: [{ port: 7202, protocol: 'tcp', nodes: [{ label: 'source', address: `127.0.8.3:${(source.address() as { port: number }).port}` }] }],
    });
    const nb = created.body;
    expect(nb.transfer).toEqual({ in: null, out: null, total: null });
    expect((await call('GET', `/v4/nodebalancers/${nb.id}/stats`)).body).toEqual({ errors: [{ reason: 'Stats are unavailable at this time.' }] });

    const received = await until('a full 50 MB download through the NodeBalancer', () => new Promise<number>((resolve, reject) => {
      let n = 0;
      const c = createConnection({ host: nb.ipv4, port: 7202 });
      c.on('data', (d) => (n += d.length));
      c.on('end', () => (n > 0 ? resolve(n) : reject(new Error('empty'))));
      c.on('error', reject);
    }), 20_000);
    expect(received).toBe(size);

    const transfer = await until('transfer reported', async () => {
      const t = (await call('GET', `/v4/nodebalancers/${nb.id}`)).body.transfer;
      return t.total !== null && t.total >= 50 * 0.95 ? t : undefined;
    }, 15_000);
    expect(transfer.out).toBeGreaterThanOrEqual(50 * 0.95);
    expect(transfer.out).toBeLessThanOrEqual(50 * 1.05);
    expect(transfer.total).toBeLessThanOrEqual(50 * 1.05);

    const stats = (await call('GET', `/v4/nodebalancers/${nb.id}/stats`)).body;
    const bucket = Math.floor(Date.now() / 300_000) * 300_000;
    const point = (series: [number, number][]) => series.find(([t]) => t === bucket || t === bucket - 300_000 && Date.now() - bucket < 5_000);
    expect(point(stats.data.connections)?.[1]).toBeGreaterThan(0);
    expect(point(stats.data.traffic.out)?.[1]).toBeGreaterThan(0);
    expect(String(stats.data.connections[0][0])).toMatch(/^\d{13}$/); // milliseconds

    process.kill(lab.info.pids.controlPlane, 'SIGKILL');
    await until('control plane gone', () => fetch(lab.info.apiUrl).then(() => false, () => true));
    restarted = runFulcrum(['control-plane', '--state', join(lab.info.stateDir, 'control-plane'),
      '--api-port', lab.info.apiUrl.split(':')[2]!, '--grpc-port', lab.info.grpcAddress.split(':')[1]!]);
    // Started from the TypeScript sources: on a loaded 2-core machine that took over 30 s.
    await until('control plane back', () => call('GET', `/v4/nodebalancers/${nb.id}`).then((r) => r.status === 200), 120_000);
    const after = (await call('GET', `/v4/nodebalancers/${nb.id}`)).body.transfer;
    expect(after.total).toBeGreaterThanOrEqual(transfer.total);
    const statsAfter = (await call('GET', `/v4/nodebalancers/${nb.id}/stats`)).body;
    expect(point(statsAfter.data.traffic.out)?.[1]).toBeGreaterThanOrEqual(point(stats.data.traffic.out)![1]);
  });
});
