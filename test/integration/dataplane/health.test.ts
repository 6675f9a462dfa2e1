import { describe, expect, it } from 'vitest';
import type { HealthEvent } from '../../../dataplane/engine.js';
import { loopback, startHttpBackend, waitFor, type HttpBackend } from '../../helpers/backends.js';
import { cleanup, newEngine } from './engine-harness.js';
import { config, freePort, node, nodebalancer, snapshot } from './snapshot.js';
import { get } from './http-client.js';

async function setup(names: string[], extra: Parameters<typeof config>[2], modes: string[] = []) {
  const backends: HttpBackend[] = [];
  for (const n of names) backends.push(await startHttpBackend(n));
  for (const b of backends) cleanup.push(() => b.close());
  const ip = loopback();
  const port = await freePort(ip);
  const { engine } = newEngine();
  const events: Array<HealthEvent & { name: string }> = [];
  const nodes = backends.map((b, i) => node(b.address, { mode: modes[i] ?? 'accept' }));
  const nameOf = new Map(nodes.map((n, i) => [n.id as number, names[i]]));
  engine.onHealth((ev) => events.push({ ...ev, name: nameOf.get(ev.nodeId)! }));
  await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, nodes, { protocol: 'http', ...extra })])]));
  const status = (name: string) => [...events].reverse().find((e) => e.name === name)?.status ?? 'unknown';
  return { backends, url: `http://${ip}:${port}`, engine, events, status };
}

describe('health checks', () => {
  it('passive: the request right after a backend dies already avoids it', async () => {
    const { backends, url, status } = await setup(['a', 'b'], { check: 'none', checkPassive: true });
    // check none: nothing has seen the nodes yet, so they stay unknown until traffic reaches them.
    await new Promise((r) => setTimeout(r, 300));
    expect([status('a'), status('b')]).toEqual(['unknown', 'unknown']);
    for (let i = 0; i < 2; i++) expect((await get(url)).status).toBe(200);
    await waitFor(() => status('a') === 'UP' && status('b') === 'UP', 5000, 'UP once traffic saw them (check none)');
    await backends[0].kill();
    for (let i = 0; i < 10; i++) {
      const r = await get(url);
      expect(r.status).toBe(200);
      expect(r.body.toString()).toBe('b');
    }
    expect(status('a')).toBe('DOWN');
  });

  it('passive: a 5xx other than 501/505 marks the node down at once', async () => {
    const { backends, url, status } = await setup(['a', 'b'], { check: 'none', checkPassive: true });
    backends[0].status = 501;
    for (let i = 0; i < 4; i++) await get(url);
    expect(status('a')).toBe('UP');
    backends[0].status = 502;
    for (let i = 0; i < 4; i++) await get(url);
    expect(status('a')).toBe('DOWN');
    for (let i = 0; i < 4; i++) expect((await get(url)).body.toString()).toBe('b');
  });

  it('active connection check: DOWN within interval x attempts + timeout, UP again after it returns', async () => {
    const { backends, url, status, events } = await setup(['a', 'b'], { check: 'connection', checkInterval: 2, checkTimeout: 1, checkAttempts: 2, checkPassive: false });
    await waitFor(() => status('a') === 'UP' && status('b') === 'UP', 5000, 'first checks pass');
    const killedAt = Date.now();
    await backends[0].kill();
    await waitFor(() => status('a') === 'DOWN', 2 * 2000 + 1000 + 1500, 'a DOWN');
    const downAt = events.find((e) => e.name === 'a' && e.status === 'DOWN')!.atMs;
    expect(downAt - killedAt).toBeLessThanOrEqual(2 * 2000 + 1000 + 500);
    for (let i = 0; i < 4; i++) expect((await get(url)).body.toString()).toBe('b');
    await backends[0].revive();
    // Back after two consecutive passes.
    await waitFor(() => status('a') === 'UP', 2 * 2000 + 1500, 'a UP again');
    const seen = new Set<string>();
    for (let i = 0; i < 4; i++) seen.add((await get(url)).body.toString());
    expect(seen).toEqual(new Set(['a', 'b']));
  });

  it('http check fails a node that answers 500; http_body fails one whose body stops matching', async () => {
    const h = await setup(['a', 'b'], { check: 'http', checkPath: '/health', checkInterval: 2, checkTimeout: 1, checkAttempts: 1, checkPassive: false });
    await waitFor(() => h.status('a') === 'UP' && h.status('b') === 'UP', 5000, 'http checks pass');
    expect(h.backends[0].healthHits).toBeGreaterThan(0);
    h.backends[0].healthStatus = 500;
    await waitFor(() => h.status('a') === 'DOWN', 5000, 'a DOWN on 500');
    expect(h.status('b')).toBe('UP');

    const body = await setup(['c', 'd'], { check: 'http_body', checkPath: '/health', checkBody: 'ok [a-z]+', checkInterval: 2, checkTimeout: 1, checkAttempts: 1, checkPassive: false });
    await waitFor(() => body.status('c') === 'UP' && body.status('d') === 'UP', 5000, 'body checks pass');
    body.backends[0].healthBody = 'maintenance';
    await waitFor(() => body.status('c') === 'DOWN', 5000, 'c DOWN on body mismatch');
    body.backends[0].healthBody = 'ok again';
    await waitFor(() => body.status('c') === 'UP', 6000, 'c UP on match');
  });

  it('reject gets no traffic and is reported DOWN; backup serves only while every accept node is down', async () => {
    const { backends, url, status } = await setup(['acc', 'rej', 'bak1', 'bak2'], { check: 'connection', checkInterval: 2, checkTimeout: 1, checkAttempts: 1, checkPassive: true }, ['accept', 'reject', 'backup', 'backup']);
    await waitFor(() => status('rej') === 'DOWN' && status('acc') === 'UP', 5000, 'statuses');
    for (let i = 0; i < 6; i++) expect((await get(url)).body.toString()).toBe('acc');
    expect(backends[1].hits + backends[2].hits + backends[3].hits).toBe(0);
    expect(backends[1].healthHits).toBe(0);
    await backends[0].kill();
    const seen = new Set<string>();
    for (let i = 0; i < 6; i++) seen.add((await get(url)).body.toString());
    // Balanced across all backups.
    expect(seen).toEqual(new Set(['bak1', 'bak2']));
    await backends[0].revive();
    await waitFor(() => status('acc') === 'UP', 6000, 'accept node back');
    for (let i = 0; i < 4; i++) expect((await get(url)).body.toString()).toBe('acc');
  });
});
