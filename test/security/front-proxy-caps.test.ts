import { connect, type Socket } from 'node:net';
import { Registry } from 'prom-client';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../dataplane/engine.js';
import { registerEndpointMetrics } from '../../dataplane/telemetry/endpoint-metrics.js';
import { silentLogger } from '../../lib/logger.js';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { echoBackend } from '../helpers/tcp.js';
import { freePort } from '../integration/dataplane/snapshot.js';

/**
 * One client exhausts a database endpoint (docs/security/traffic.md): an allowed address opens
 * 250 idle connections to a data plane's database endpoint. It holds 200 (its per-client cap),
 * refuses the rest at once and counts them, serves another client, and closes the idle ones after
 * its idle timeout (shortened to 2 s here). Real sockets on both sides; the member is a TCP echo
 * server.
 */
describe('database endpoint caps (data plane)', () => {
  let engine: ProxyEngine;
  let node: TcpBackend;
  const registry = new Registry();
  const host = loopback();
  let port = 0;
  const sockets: Socket[] = [];

  const refused = async (): Promise<Record<string, number>> => {
    const m = await registry.getSingleMetric('fulcrum_dataplane_database_refused_total')!.get();
    return Object.fromEntries(m.values.filter((v) => v.value > 0).map((v) => [String(v.labels.reason), v.value]));
  };
  const open = (): number => [...engine.databaseEndpoints()].reduce((n, e) => n + e.stats.open, 0);

  beforeAll(async () => {
    node = await echoBackend(loopback(), 'n');
    port = await freePort(host);
    engine = createProxyEngine({ logger: silentLogger(), endpoints: { limits: { idleTimeoutMs: 2000 } } });
    registerEndpointMetrics(registry, engine);
    await engine.apply({
      version: 1,
      databaseEndpoints: [{ databaseId: 9, role: 'primary', address: host, port, allowList: ['127.0.0.0/8'], targets: [{ host: node.ip, port: node.port }] }],
    });
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await engine?.close();
    await node?.close();
  });

  function openFrom(from: string, read = true): Promise<Socket> {
    return new Promise((resolve) => {
      const s = connect({ host, port, localAddress: from });
      sockets.push(s);
      s.on('error', () => undefined);
      // Read (and drop) what comes back, so the endpoint's close is seen.
      s.once('connect', () => {
        if (read) s.resume();
        resolve(s);
      });
      s.once('close', () => resolve(s));
    });
  }

  it('cuts one address back to its cap, serves another, and closes idle sessions', async () => {
    const attacker = loopback();
    const mine = await Promise.all(Array.from({ length: 250 }, () => openFrom(attacker)));
    await waitFor(async () => (await refused()).client_cap === 50, 10_000, '50 refusals counted');
    expect(await refused()).toEqual({ client_cap: 50 });
    await waitFor(() => mine.filter((s) => !s.destroyed).length === 200, 5_000, '200 held');
    expect(open()).toBe(200);

    const other = await openFrom(loopback(), false);
    // The echo node answers the PROXY header too; the client's bytes come back at the end.
    const answer = await new Promise<string>((resolve, reject) => {
      let got = '';
      setTimeout(() => reject(new Error(`no answer, got ${JSON.stringify(got)}, destroyed ${other.destroyed}`)), 5000);
      other.on('data', (d) => {
        got += d.toString();
        if (got.endsWith('hi')) resolve(got);
      });
      other.write('hi');
    });
    expect(answer).toMatch(/^n:PROXY TCP4 [\s\S]*hi$/);

    await waitFor(() => mine.every((s) => s.destroyed || s.readyState === 'closed'), 10_000, 'idle sessions closed');
    await waitFor(() => open() === 0, 10_000, 'endpoint empty');
  });
});
