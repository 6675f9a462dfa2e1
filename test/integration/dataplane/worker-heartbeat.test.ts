import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { startTcpBackend, waitFor } from '../../helpers/backends.js';
import { greeting } from './clients.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';
import { cleanup, startTwoWorkers, workerPids } from './workers-fixture.js';

/**
 * A worker that stops answering (docs/dataplane.md, "Workers"): the primary pings each worker
 * every second over the IPC channel and replaces one silent for more than 5 s, as it replaces
 * one that exits. SIGSTOP makes a worker silent for real (its event loop does not run); a stop
 * shorter than the bound stands for a worker merely busy. Addresses: 127.174.0.0/16.
 */

/** A worker in the stopped state (`T` in /proc/<pid>/stat). */
function stopped(pid: number): boolean {
  try {
    return /\) T /.test(readFileSync(`/proc/${pid}/stat`, 'utf8'));
  } catch {
    return false;
  }
}

describe('worker heartbeat', () => {
  it('replaces a wedged worker, counts and logs it, and the replacement serves', async () => {
    const b = await startTcpBackend('w', { ip: '127.174.1.1' });
    cleanup.push(() => b.close());
    const nb = '127.174.2.1';
    const dp = await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(7741, [node(b.address)])])]));
    await waitFor(() => greeting(nb, 7741, '127.174.3.99').then((g) => g === 'w', () => false), 30_000, 'listener up');
    const [wedged, other] = workerPids(dp.pid) as [number, number];
    const stoppedAt = Date.now();
    process.kill(wedged, 'SIGSTOP');
    await waitFor(() => stopped(wedged), 10_000, 'the worker is stopped');
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && !now.includes(wedged) && now.includes(other);
    }, 60_000, 'a replacement for the wedged worker');
    console.log(`[worker-heartbeat] a SIGSTOPped worker was replaced ${Date.now() - stoppedAt} ms after the stop (bound: 5 s of silence)`);
    expect(await dp.metric('fulcrum_dataplane_worker_replacements_total', 'reason="unresponsive"')).toBe(1);
    expect(dp.output()).toContain('worker stopped answering; killing it and starting a replacement');
    // Round-robin alternates the workers, so ten in a row reach the replacement too.
    await waitFor(() => greeting(nb, 7741, '127.174.3.1').then((g) => g === 'w', () => false), 30_000, 'served after the replacement');
    for (let i = 0; i < 10; i++) expect(await greeting(nb, 7741, '127.174.3.1')).toBe('w');
  });

  it('keeps a worker that is silent for less than the bound', async () => {
    const b = await startTcpBackend('k', { ip: '127.174.1.2' });
    cleanup.push(() => b.close());
    const nb = '127.174.2.2';
    const dp = await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(7742, [node(b.address)])])]));
    await waitFor(() => greeting(nb, 7742, '127.174.4.99').then((g) => g === 'k', () => false), 30_000, 'listener up');
    const pids = workerPids(dp.pid);
    process.kill(pids[0]!, 'SIGSTOP');
    await waitFor(() => stopped(pids[0]!), 10_000, 'the worker is stopped');
    const stoppedAt = Date.now();
    // 2.5 s without an answer: two or three missed pings, half the bound.
    await waitFor(() => Date.now() - stoppedAt >= 2_500, 10_000, 'half the bound');
    process.kill(pids[0]!, 'SIGCONT');
    // Past the bound as counted from the stop, and then some: the same two workers.
    const deadline = stoppedAt + 8_000;
    const seen = new Set<string>();
    await waitFor(() => {
      seen.add(workerPids(dp.pid).join(','));
      return Date.now() >= deadline;
    }, 30_000, 'the bound passed');
    expect([...seen]).toEqual([pids.join(',')]);
    expect(await dp.metric('fulcrum_dataplane_worker_replacements_total', 'reason="unresponsive"')).toBeUndefined();
    for (let i = 0; i < 10; i++) expect(await greeting(nb, 7742, '127.174.4.1')).toBe('k');
  });
});
