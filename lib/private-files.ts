import { chmodSync, lstatSync, mkdirSync, readdirSync } from 'node:fs';
import { join } from 'node:path';

/**
 * State folders hold passwords, keys and customer data; no other local user may read them
 * (docs/security/secrets.md). Every process sets umask 077 at start so that whatever it (and the
 * servers it starts) creates is private, and makes its state folder private again on start, which
 * also repairs folders written by earlier versions.
 */
export function restrictUmask(): void {
  try {
    process.umask(0o077);
  } catch {
    // Worker threads cannot change the umask; files are still created with explicit modes.
  }
}

/**
 * Creates `dir` (0700) if needed and removes group and other permission bits from it and from
 * everything under it (owner bits are kept, so executables stay executable). Symbolic links are
 * not followed. Files that vanish while walking (a server's temporary files) are skipped.
 */
export function makePrivate(dir: string, opts: { shareGroup?: number } = {}): void {
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  walk(dir, opts.shareGroup);
}

/**
 * `shareGroup`: a folder owned by this group keeps its group search bit (reach a known path, list
 * nothing): the agent shares the folders on the way to a database's files with the group its
 * servers run in (docs/security/mysql.md), and a restart must not cut them off.
 */
function walk(path: string, shareGroup: number | undefined): void {
  let st;
  try {
    st = lstatSync(path);
  } catch {
    return;
  }
  if (st.isSymbolicLink()) return;
  const keep = st.isDirectory() && shareGroup !== undefined && st.gid === shareGroup ? 0o010 : 0;
  if ((st.mode & 0o077 & ~keep) !== 0) {
    try {
      chmodSync(path, st.mode & (0o700 | keep));
    } catch {
      // Not ours to change (e.g. a file a container created under another uid); left as is.
    }
  }
  if (!st.isDirectory()) return;
  let names: string[];
  try {
    names = readdirSync(path);
  } catch {
    return;
  }
  for (const n of names) walk(join(path, n), shareGroup);
}
