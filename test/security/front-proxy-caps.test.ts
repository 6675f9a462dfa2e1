import { connect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createFrontProxy, type FrontProxy, type FrontProxyRefusal } from '../../agent/endpoints/front-proxy.js';
import { silentLogger } from '../../lib/logger.js';
import { loopback, waitFor, type TcpBackend } from '../helpers/backends.js';
import { echoBackend } from '../helpers/tcp.js';
import { freePort } from '../integration/dataplane/snapshot.js';

/**
 * One client exhausts a database endpoint (docs/security/traffic.md): an allowed address opens
 * 250 idle connections. The front proxy holds 200 (its per-client cap), refuses the rest at once
 * and counts them, serves another client, and closes the idle ones after its idle timeout
 * (shortened to 2 s here). Real sockets on both sides; the node is a TCP echo server.
 */
describe('database front proxy caps', () => {
  let proxy: FrontProxy;
  let node: TcpBackend;
  const host = loopback();
  let port = 0;
  const refused: FrontProxyRefusal[] = [];
  const sockets: Socket[] = [];

  beforeAll(async () => {
    node = await echoBackend(loopback(), 'n');
    port = await freePort(host);
    proxy = createFrontProxy({ host, port, logger: silentLogger(), name: 'sec', limits: { idleTimeoutMs: 2000 }, onRefused: (r) => refused.push(r) });
    await proxy.listen();
    proxy.setAllowList(['127.0.0.0/8']);
    proxy.setBackends([{ host: node.ip, port: node.port }]);
  });
  afterAll(async () => {
    for (const s of sockets) s.destroy();
    await proxy?.close();
    await node?.close();
  });

  function open(from: string, read = true): Promise<Socket> {
    return new Promise((resolve) => {
      const s = connect({ host, port, localAddress: from });
      sockets.push(s);
      s.on('error', () => undefined);
      // Read (and drop) what comes back, so the proxy's close is seen.
      s.once('connect', () => {
        if (read) s.resume();
        resolve(s);
      });
      s.once('close', () => resolve(s));
    });
  }

  it('cuts one address back to its cap, serves another, and closes idle sessions', async () => {
    const attacker = loopback();
    const mine = await Promise.all(Array.from({ length: 250 }, () => open(attacker)));
    await waitFor(() => refused.length === 50, 10_000, '50 refusals counted');
    expect(new Set(refused)).toEqual(new Set(['client_cap']));
    await waitFor(() => mine.filter((s) => !s.destroyed).length === 200, 5_000, '200 held');
    expect(proxy.connections()).toBe(200);

    const other = await open(loopback(), false);
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
    await waitFor(() => proxy.connections() === 0, 10_000, 'proxy empty');
  });
});
