import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';

/** What the data plane asks for at start unless told otherwise (the kernel's usual fs.nr_open). */
export const DEFAULT_NOFILE = 1_048_576;

function readSoftLimit(): number {
  try {
    const line = readFileSync('/proc/self/limits', 'utf8').split('\n').find((l) => l.startsWith('Max open files'));
    const soft = line?.split(/\s+/)[3];
    if (soft === undefined) return Infinity;
    return soft === 'unlimited' ? Infinity : Number(soft);
  } catch {
    return Infinity; // not Linux: the limit is unknown and no descriptor budget is enforced
  }
}

function readNrOpen(): number {
  try {
    return Number(readFileSync('/proc/sys/fs/nr_open', 'utf8').trim()) || DEFAULT_NOFILE;
  } catch {
    return DEFAULT_NOFILE;
  }
}

/**
 * Raises this process's open-file limit (soft and hard) to `target`, never lowers it, and returns
 * the soft limit now in force. Node has no setrlimit and already raises soft to hard at start; a
 * hard limit above that needs root (CAP_SYS_RESOURCE), so `prlimit --pid` from util-linux is asked
 * to do it on our pid. Without prlimit or the privilege the current limit stays, and the
 * connection budget (throttle/conn-limits.ts) is computed from it (docs/dataplane.md).
 */
export function raiseFdLimit(target: number): { limit: number; raised: boolean; error?: string } {
  const before = readSoftLimit();
  const want = Math.min(target, readNrOpen());
  if (!(before < want)) return { limit: before, raised: false };
  const r = spawnSync('prlimit', ['--pid', String(process.pid), `--nofile=${want}:${want}`], { encoding: 'utf8', timeout: 5000 });
  const after = readSoftLimit();
  if (after > before) return { limit: after, raised: true };
  return { limit: after, raised: false, error: r.error?.message ?? (r.stderr.trim() || `prlimit exited ${r.status}`) };
}
