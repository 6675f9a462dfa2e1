import { readFileSync } from 'node:fs';
import { afterAll, afterEach } from 'vitest';
import { waitFor } from '../../helpers/backends.js';
import { startDataplaneProcess, type DataplaneProcess } from '../../security/dataplane-process.js';
import type { snapshot } from './snapshot.js';

/**
 * A data plane of two worker processes (docs/dataplane.md, "Workers") started as the real CLI,
 * shared by the tests of what the workers must agree on. Importing this file registers the
 * cleanup hooks below in the test file.
 */

/** Cleanups run after each test, last pushed first; a cleanup that fails fails the test. */
export const cleanup: (() => Promise<unknown> | unknown)[] = [];
afterEach(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});
afterAll(async () => {
  while (cleanup.length > 0) await cleanup.pop()!();
});

/** The worker pids of a primary (its child processes); none once it is gone. */
export function workerPids(pid: number): number[] {
  try {
    return readFileSync(`/proc/${pid}/task/${pid}/children`, 'utf8').trim().split(/\s+/).filter(Boolean).map(Number);
  } catch {
    return [];
  }
}

/**
 * `fulcrum dataplane --workers 2 --distribution rr` serving `snap` (round-robin hands
 * consecutive connections to alternate workers, so a run of connections reaches both), stopped
 * after the test. Resolves once both workers run.
 */
export async function startTwoWorkers(snap: ReturnType<typeof snapshot>, flags: string[] = []): Promise<DataplaneProcess> {
  const dp = await startDataplaneProcess(snap, { flags: ['--workers', '2', '--distribution', 'rr', ...flags] });
  cleanup.push(() => dp.stop());
  await waitFor(() => workerPids(dp.pid).length === 2, 30_000, 'two workers');
  return dp;
}
