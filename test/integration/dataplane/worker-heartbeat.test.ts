import { describe, expect, it } from 'vitest';
import { startTcpBackend, waitFor } from '../../helpers/backends.js';
import { greeting } from './clients.js';
import { config, node, nodebalancer, snapshot } from './snapshot.js';
import { cleanup, startTwoWorkers, workerPids } from './workers-fixture.js';

/**
 * The workers' heartbeat (docs/dataplane.md, "Workers"): the primary pings each worker every
 * second over the IPC channel and replaces one silent for more than 5 s. A worker stopped
 * (SIGSTOP: it exists, its loop answers nothing) is killed and replaced, and the replacement
 * serves; one stopped for less than the bound, as a worker held up by load would be, is kept.
 * Addresses: 127.67.0.0/16.
 */

const REPLACED = 'fulcrum_dataplane_worker_replacements_total';

async function servedPair(nb: string, port: number, name: string) {
  const b = await startTcpBackend(name, { ip: '127.67.1.1' });
  cleanup.push(() => b.close());
  const dp = await startTwoWorkers(snapshot(1, [nodebalancer(nb, [config(port, [node(b.address)])])]));
  await waitFor(() => greeting(nb, port, '127.67.3.99').then((g) => g === name, () => false), 30_000, 'listener up');
  return dp;
}

describe('a worker that stops answering', () => {
  it('is killed and replaced, and the replacement serves', async () => {
    const nb = '127.67.2.1';
    const dp = await servedPair(nb, 7681, 'w');
    const before = workerPids(dp.pid);
    expect(before).toHaveLength(2);
    const stoppedAt = Date.now();
    process.kill(before[0]!, 'SIGSTOP');
    // A stopped process cannot be ended by anything softer than SIGKILL; resume it if the test fails.
    cleanup.push(() => {
      try {
        process.kill(before[0]!, 'SIGCONT');
      } catch {
        // Already replaced (killed).
      }
    });
    await waitFor(() => {
      const now = workerPids(dp.pid);
      return now.length === 2 && !now.includes(before[0]!) && now.includes(before[1]!);
    }, 60_000, 'the stopped worker replaced');
    console.log(`[worker-heartbeat] a stopped worker was replaced ${Date.now() - stoppedAt} ms after SIGSTOP`);
    expect(await dp.metric(REPLACED, 'reason="unresponsive"')).toBe(1);
    expect(dp.output()).toContain('worker stopped answering; killing it and starting a replacement');
    // Round-robin alternates the two workers: ten connections in a row reach the replacement too.
    await waitFor(() => greeting(nb, 7681, '127.67.3.1').then((g) => g === 'w', () => false), 30_000, 'served after the replacement');
    for (let i = 0; i < 10; i++) expect(await greeting(nb, 7681, '127.67.3.1')).toBe('w');
  });

  it('is kept when it answers again within the bound (a worker held up by load)', async () => {
    const nb = '127.67.2.2';
    const dp = await servedPair(nb, 7682, 'v');
    const before = workerPids(dp.pid);
    expect(before).toHaveLength(2);
    process.kill(before[0]!, 'SIGSTOP');
    // Silent for 3 s, under the 5 s bound (the stall itself, not a wait for state).
    await new Promise((r) => setTimeout(r, 3_000));
    process.kill(before[0]!, 'SIGCONT');
    // A scrape gathers every worker's counters, so once one returns the resumed worker has been
    // heard from again: from then on this stall can no longer get it replaced.
    await waitFor(async () => (await dp.metrics()).includes('fulcrum_dataplane_open_connections'), 30_000, 'a scrape both workers answered');
    expect(workerPids(dp.pid).sort()).toEqual([...before].sort());
    expect((await dp.metric(REPLACED, 'reason="unresponsive"')) ?? 0).toBe(0);
    for (let i = 0; i < 10; i++) expect(await greeting(nb, 7682, '127.67.3.2')).toBe('v');
    expect(workerPids(dp.pid).sort()).toEqual([...before].sort());
  });
});
