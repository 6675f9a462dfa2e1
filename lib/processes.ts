import { readdirSync, readFileSync } from 'node:fs';

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

/**
 * Live processes (not zombies) of `program` (argv[0] as it was started) one of whose arguments
 * is exactly `arg`, such as `--datadir=/path`: how a server that no pid file names any more is
 * still found.
 */
export function processesWithArg(program: string, arg: string): number[] {
  const out: number[] = [];
  for (const p of readdirSync('/proc')) {
    if (!/^\d+$/.test(p)) continue;
    try {
      const argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
      if (argv[0] !== program || !argv.includes(arg)) continue;
      if (/^\d+ \(.*\) Z/.test(readFileSync(`/proc/${p}/stat`, 'utf8'))) continue;
      out.push(Number(p));
    } catch {
      // It ended while we looked.
    }
  }
  return out;
}
