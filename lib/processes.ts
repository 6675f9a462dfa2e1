import { readFileSync } from 'node:fs';

/**
 * Whether `pid` is a live process (not a zombie) whose command line contains `marker`, such as
 * the option file only it was started with: how a pid kept in a file is told from a later,
 * unrelated process that reuses the number.
 */
export function runsWith(pid: number, marker: string): boolean {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    if (/^\d+ \(.*\) Z/.test(stat)) return false;
    return readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(marker);
  } catch {
    return false;
  }
}
