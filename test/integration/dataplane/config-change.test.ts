import { request } from 'node:http';
import { describe, expect, it } from 'vitest';
import { loopback, patternBytes, sha256, startHttpBackend, startTcpBackend, waitFor } from '../../helpers/backends.js';
import { cleanup, newEngine } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { greeting, tcpConnect, readLine } from './clients.js';
import { get } from './http-client.js';

/** Starts a slow download and resolves with its checksum once it completes. */
function download(url: string): { started: Promise<void>; done: Promise<{ sum: string; len: number; backend: string }> } {
  let started!: () => void;
  const startedP = new Promise<void>((r) => (started = r));
  const done = new Promise<{ sum: string; len: number; backend: string }>((resolve, reject) => {
    const req = request(url, { agent: false }, (res) => {
      const chunks: Buffer[] = [];
      res.on('data', (d: Buffer) => {
        if (chunks.length === 0) started();
        chunks.push(d);
      });
      res.on('end', () => {
        const body = Buffer.concat(chunks);
        if (!res.complete) reject(new Error('download cut'));
        else resolve({ sum: sha256(body), len: body.length, backend: String(res.headers['x-backend']) });
      });
      res.on('error', reject);
      res.on('aborted', () => reject(new Error('aborted')));
    });
    req.on('error', reject);
    req.end();
  });
  return { started: startedP, done };
}

describe('config changes', () => {
  it('replacing the node set while 50 long downloads run cuts none; new requests go only to the new nodes', async () => {
    const old1 = await startHttpBackend('old1');
    const old2 = await startHttpBackend('old2');
    const new1 = await startHttpBackend('new1');
    const new2 = await startHttpBackend('new2');
    cleanup.push(() => old1.close(), () => old2.close(), () => new1.close(), () => new2.close());
    const ip = loopback();
    const port = await freePort(ip);
    const { engine } = newEngine();
    const cfg = config(port, [node(old1.address), node(old2.address)], { protocol: 'http', check: 'connection', checkInterval: 2, checkTimeout: 1 });
    const nb = nodebalancer(ip, [cfg]);
    await engine.apply(snapshot(1, [nb]));
    const size = 2 * 1024 * 1024;
    // ~2 MB each, trickled out over a second or more.
    const downloads = Array.from({ length: 50 }, () => download(`http://${ip}:${port}/download?bytes=${size}&seed=9&slowMs=40`));
    await Promise.all(downloads.map((d) => d.started));
    await engine.apply(snapshot(2, [{ ...nb, configs: [{ ...cfg, nodes: [node(new1.address), node(new2.address)] }] }]));
    const fresh = new Set<string>();
    for (let i = 0; i < 10; i++) fresh.add((await get(`http://${ip}:${port}/`)).body.toString());
    expect(fresh).toEqual(new Set(['new1', 'new2']));
    const results = await Promise.all(downloads.map((d) => d.done));
    const want = sha256(patternBytes(size, 9));
    for (const r of results) {
      expect(r.len).toBe(size);
      expect(r.sum).toBe(want);
      expect(['old1', 'old2']).toContain(r.backend);
    }
  });

  it('leaves unchanged listeners untouched and drains a removed one with a deadline', async () => {
    const a = await startTcpBackend('a');
    cleanup.push(() => a.close());
    const ip = loopback();
    const [p1, p2] = [await freePort(ip), await freePort(ip)];
    const { engine } = newEngine({ drainTimeoutMs: 1500 });
    const c1 = config(p1, [node(a.address)]);
    const c2 = config(p2, [node(a.address)]);
    const nb = nodebalancer(ip, [c1, c2]);
    await engine.apply(snapshot(1, [nb]));
    const kept = await tcpConnect(ip, p1);
    expect(await readLine(kept)).toBe('a');
    const draining = await tcpConnect(ip, p2);
    expect(await readLine(draining)).toBe('a');
    await engine.apply(snapshot(2, [{ ...nb, configs: [c1] }]));
    // Removed port: no new connections.
    await expect(tcpConnect(ip, p2)).rejects.toThrow(/ECONNREFUSED/);
    // Its open connection still works until the deadline...
    draining.write('still here\n');
    expect(await readLine(draining)).toBe('still here');
    // ...then it is cut.
    await waitFor(() => draining.destroyed || draining.readableEnded, 5000, 'drain deadline');
    // The unchanged listener's connection was never disturbed.
    kept.write('kept\n');
    expect(await readLine(kept)).toBe('kept');
    expect(await greeting(ip, p1)).toBe('a');
    kept.destroy();
  });
});
