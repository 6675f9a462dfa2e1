import { describe, expect, it } from 'vitest';
import { startTcpBackend, waitFor, type TcpBackend } from '../../helpers/backends.js';
import { greeting, readLine, tcpConnect } from './clients.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';
import { cleanup, startTwoWorkers, workerPids } from './workers-fixture.js';

/**
 * A data plane of two worker processes (docs/dataplane.md, "Workers"), started as the real CLI
 * with `--workers 2`: what the workers must agree on holds across them, and a worker that dies
 * takes only its own connections with it. Addresses: 127.61.0.0/16.
 */

async function backend(ip: string, name: string): Promise<TcpBackend> {
  const b = await startTcpBackend(name, { ip });
  cleanup.push(() => b.close());
  return b;
}

describe('a data plane of two workers', () => {
  it('holds client_conn_throttle 5/s for one client IP across both workers', async () => {
    const b = await backend('127.61.1.1', 't');
    const nb = '127.61.2.1';
    const dp = await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(7611, [node(b.address)])], { clientConnThrottle: 5 })]));
    await waitFor(() => greeting(nb, 7611, '127.61.3.99').then((g) => g === 't', () => false), 30_000, 'listener up');
    // Wait out the window the probe above used (another IP, but keep the burst alone in its second).
    const burst = async () => {
      const started = Date.now();
      const results = await Promise.all(Array.from({ length: 30 }, () => greeting(nb, 7611, '127.61.3.1').catch(() => '')));
      return { ok: results.filter((r) => r === 't').length, ms: Date.now() - started };
    };
    // On a busy machine a burst may spread over more than a second; retry until one did not.
    let r = await burst();
    for (let i = 0; i < 5 && r.ms > 900; i++) {
      await new Promise((res) => setTimeout(res, 1100));
      r = await burst();
    }
    expect(r.ms).toBeLessThanOrEqual(900);
    // Per worker it would be up to 10 (5 in each); over the data plane it is 5.
    expect(r.ok).toBeGreaterThanOrEqual(4);
    expect(r.ok).toBeLessThanOrEqual(5);
    // Both workers took part: each refused some of the burst (the refusals are summed in /metrics).
    expect(await dp.metric('fulcrum_dataplane_connections_refused_total', 'reason="throttle"')).toBeGreaterThanOrEqual(30 - r.ok);
    // Another client IP is not affected.
    const other = await Promise.all(Array.from({ length: 3 }, () => greeting(nb, 7611, '127.61.3.2').catch(() => '')));
    expect(other).toEqual(['t', 't', 't']);
  });

  it('table stickiness sends each client IP to one node whichever worker accepts it', async () => {
    const a = await backend('127.61.1.2', 'a');
    const c = await backend('127.61.1.3', 'c');
    const nb = '127.61.2.2';
    await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(7612, [node(a.address), node(c.address)], { stickiness: 'table' })])]));
    await waitFor(() => greeting(nb, 7612, '127.61.4.99').then((g) => g === 'a' || g === 'c', () => false), 30_000, 'listener up');
    const seen = new Set<string>();
    for (let client = 1; client <= 8; client++) {
      const ip = `127.61.4.${client}`;
      // Round-robin distribution alternates the workers, so these ten reach both.
      const names: string[] = [];
      for (let i = 0; i < 10; i++) names.push(await greeting(nb, 7612, ip));
      expect(new Set(names).size, `${ip}: ${names.join(',')}`).toBe(1);
      seen.add(names[0]!);
    }
    // The table pins, it does not send everyone to one node.
    expect([...seen].sort()).toEqual(['a', 'c']);
  });

  it('serves a database endpoint from every worker and sums its metrics', async () => {
    const member = await startTcpBackend('db', { ip: '127.61.8.2', expectProxy: true });
    cleanup.push(() => member.close());
    const dp = await startTwoWorkers({
      ...snapshot(1, []),
      databaseEndpoints: [{ databaseId: 61, role: 'primary', address: '127.61.8.1', port: 7631, allowList: ['127.61.8.0/24'], requireTls: false, targets: [{ host: '127.61.8.2', port: member.port }] }],
    });
    await waitFor(() => greeting('127.61.8.1', 7631, '127.61.8.9').then((g) => g === 'db', () => false), 30_000, 'endpoint up');
    for (let i = 0; i < 6; i++) expect(await greeting('127.61.8.1', 7631, '127.61.8.5')).toBe('db');
    // Every connection reached the member with the client's address in its PROXY header.
    expect(member.proxyHeaders.filter((h) => h.command === 'PROXY' && h.srcIp === '127.61.8.5').length).toBe(6);
    // The allow_list holds in every worker.
    expect(await greeting('127.61.8.1', 7631, '127.61.9.5').catch(() => '')).toBe('');
    await waitFor(async () => ((await dp.metric('fulcrum_dataplane_database_connections_total', 'database_id="61"')) ?? 0) >= 7, 10_000, 'summed endpoint metric');
  });

  it('a worker killed takes only its own connections; the other\'s stay open and a new worker replaces it', async () => {
    const b = await backend('127.61.1.4', 'k');
    const nb = '127.61.2.3';
    const dp = await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(7613, [node(b.address)])])]));
    await waitFor(() => greeting(nb, 7613, '127.61.5.99').then((g) => g === 'k', () => false), 30_000, 'listener up');
    const before = workerPids(dp.pid);
    const socks = [];
    for (let i = 0; i < 10; i++) {
      const s = await tcpConnect(nb, 7613, '127.61.5.1');
      s.on('error', () => undefined);
      expect(await readLine(s)).toBe('k');
      socks.push(s);
    }
    const closed = new Set<number>();
    // allowHalfOpen clients: the dead worker's FIN shows as 'end'.
    socks.forEach((s, i) => {
      s.once('end', () => closed.add(i));
      s.once('close', () => closed.add(i));
    });
    process.kill(before[0]!, 'SIGKILL');
    // Its connections close; round-robin gave it about half of them.
    await waitFor(() => closed.size > 0, 10_000, 'the killed worker\'s connections close');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && !now.includes(before[0]!) && now.includes(before[1]!);
    }, 30_000, 'a replacement worker');
    const survivors = socks.filter((_, i) => !closed.has(i));
    expect(survivors.length).toBeGreaterThan(0);
    expect(closed.size).toBeGreaterThan(0);
    // The survivors still carry data (the backend echoes), after the replacement came up.
    for (const s of survivors) {
      const answer = new Promise<string>((resolve) => s.once('data', (d: Buffer) => resolve(d.toString())));
      s.write('still here');
      expect(await answer).toBe('still here');
    }
    expect(socks.filter((_, i) => !closed.has(i)).length).toBe(survivors.length);
    // New connections are served by both workers (the replacement included): ten in a row all answer.
    for (let i = 0; i < 10; i++) expect(await greeting(nb, 7613, '127.61.5.2')).toBe('k');
    for (const s of socks) s.destroy();
  });
});
