import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import type { HealthEvent } from '../../../dataplane/engine.js';
import { loopback, waitFor } from '../../helpers/backends.js';
import { cleanup, newEngine } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { readAll, tcpConnect } from './clients.js';

/**
 * HAProxy with `accept-proxy` as an independent PROXY protocol receiver: it rejects a malformed
 * header, and echoes the source/destination it decoded.
 */
async function startHaproxyReceiver(): Promise<{ address: string }> {
  const ip = loopback();
  const port = await freePort(ip);
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-hap-'));
  const cfg = join(dir, 'haproxy.cfg');
  writeFileSync(cfg, [
    'global', '  nbthread 1', 'defaults', '  mode http', '  timeout connect 5s', '  timeout client 10s', '  timeout server 10s',
    'frontend pp', `  bind ${ip}:${port} accept-proxy`,
    '  http-request return status 200 content-type text/plain lf-string "%[src] %[src_port] %[dst] %[dst_port]"', '',
  ].join('\n'));
  const child = spawn('haproxy', ['-db', '-f', cfg], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  child.stderr.on('data', (d) => (stderr += d));
  cleanup.push(() => {
    child.kill('SIGKILL');
    rmSync(dir, { recursive: true, force: true });
  });
  await waitFor(async () => {
    if (child.exitCode !== null) throw new Error(`haproxy exited: ${stderr}`);
    const s = await tcpConnect(ip, port).catch(() => null);
    s?.destroy();
    return s !== null;
  }, 10_000, 'haproxy listening');
  return { address: `${ip}:${port}` };
}

describe('PROXY protocol against HAProxy accept-proxy', () => {
  for (const version of ['v1', 'v2'] as const) {
    it(`${version}: HAProxy decodes the true client address and our http health checks pass`, async () => {
      const hap = await startHaproxyReceiver();
      const ip = loopback();
      const port = await freePort(ip);
      const { engine } = newEngine();
      const events: HealthEvent[] = [];
      engine.onHealth((e) => events.push(e));
      await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(hap.address)], { proxyProtocol: version, check: 'http', checkPath: '/', checkInterval: 30, checkTimeout: 3 })])]));
      // The check (header + HTTP/1.0 request) only passes if HAProxy accepted our header.
      await waitFor(() => events.some((e) => e.status === 'UP'), 10_000, 'health check UP');
      const client = loopback();
      const s = await tcpConnect(ip, port, client);
      s.write('GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n');
      const text = (await readAll(s)).toString();
      expect(text).toMatch(/^HTTP\/1\.1 200/);
      expect(text.split('\r\n\r\n')[1]).toBe(`${client} ${s.localPort} ${ip} ${port}`);
    });
  }
});
