import type { Writable } from 'node:stream';

/**
 * Resolves once `s` can take more ('drain') or is gone ('close'), whichever comes first, and
 * leaves neither listener behind: a writer that waits this way thousands of times (a large
 * dump fed to a client) would otherwise pile up one 'close' listener per wait.
 */
export function drainedOrClosed(s: Writable): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      s.off('drain', done);
      s.off('close', done);
      resolve();
    };
    s.on('drain', done);
    s.on('close', done);
  });
}
