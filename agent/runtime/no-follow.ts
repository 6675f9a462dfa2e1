import { randomBytes } from 'node:crypto';
import { constants } from 'node:fs';
import { copyFile, lchown, lstat, mkdir, open, readdir, rename, rmdir, unlink, type FileHandle } from 'node:fs/promises';
import { basename, dirname } from 'node:path';
import { FulcrumError } from '../../lib/errors.js';

/**
 * File operations for folders a node's uid can write (its data dir, its run dir), done by the
 * agent, which is root (docs/security/mysql.md, "The agent writes nothing through a node's
 * links"). A node's uid may plant a link, or swap a folder for a link, at any moment, and root
 * follows links: a plain `writeFile`, `chown`, `chmod`, `rm -r` or `cp` there could write, give
 * away or delete any file of the host. So here:
 * - the last component is never followed (O_NOFOLLOW, lchown, unlink, rename replaces a link);
 * - a folder being worked in is held open and every name in it is reached through that
 *   descriptor (`/proc/self/fd/N/name`: Node has no openat), so swapping the folder for a link
 *   afterwards changes nothing;
 * - a new file is created under a fresh name with O_EXCL, given its owner and mode through its
 *   descriptor, then renamed over the old name.
 * Linux only (as the process runtime is).
 */

const { O_RDONLY, O_WRONLY, O_CREAT, O_EXCL, O_NOFOLLOW, O_DIRECTORY, O_NONBLOCK } = constants;

export interface Owner {
  uid: number;
  gid: number;
}

const code = (e: unknown) => (e as NodeJS.ErrnoException).code;

/** Opens a folder, refusing a link at its last component. */
export function openDir(path: string): Promise<FileHandle> {
  return open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
}

/** `name` in the folder `dir` holds open. */
export function inDir(dir: FileHandle, name: string): string {
  if (!name || name === '.' || name === '..' || name.includes('/') || name.includes('\0')) {
    throw new FulcrumError('validation', `not a plain file name: ${JSON.stringify(name)}`);
  }
  return `/proc/self/fd/${dir.fd}/${name}`;
}

/** The folder's entries, read through its descriptor. */
export function entries(dir: FileHandle): Promise<string[]> {
  return readdir(`/proc/self/fd/${dir.fd}`);
}

/** Runs `fn` with the folder `path` held open (no link at its last component). */
export async function withDir<T>(path: string, fn: (dir: FileHandle) => Promise<T>): Promise<T> {
  const dir = await openDir(path);
  try {
    return await fn(dir);
  } finally {
    await dir.close();
  }
}

/**
 * Writes `path` as a new file with `mode` (and `owner`), replacing whatever had that name (a
 * planted link included) without writing through it.
 */
export async function writeFileNoFollow(path: string, content: string | Buffer, o: { mode: number; owner?: Owner }): Promise<void> {
  await withDir(dirname(path), async (dir) => {
    const tmp = inDir(dir, `.${basename(path)}.${randomBytes(6).toString('hex')}.tmp`);
    const fh = await open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW, o.mode);
    try {
      await fh.writeFile(content);
      if (o.owner) await fh.chown(o.owner.uid, o.owner.gid);
      await fh.chmod(o.mode);
      await fh.close();
      await rename(tmp, inDir(dir, basename(path)));
    } catch (e) {
      await fh.close().catch(() => undefined);
      await unlink(tmp).catch(() => undefined);
      throw e;
    }
  });
}

/**
 * Makes `path` a real folder with `mode` (and `owner`): one that is missing is made; a link or
 * file in its place is removed first. Returns it held open (the caller closes it).
 */
export async function ensureDirOpen(path: string, o: { mode: number; owner?: Owner }): Promise<FileHandle> {
  const parent = await openDir(dirname(path));
  try {
    const at = inDir(parent, basename(path));
    for (let attempt = 0; ; attempt++) {
      try {
        const dir = await openDir(at);
        try {
          if (o.owner) {
            const st = await dir.stat();
            if (st.uid !== o.owner.uid || st.gid !== o.owner.gid) await dir.chown(o.owner.uid, o.owner.gid);
          }
          await dir.chmod(o.mode);
          return dir;
        } catch (e) {
          await dir.close();
          throw e;
        }
      } catch (e) {
        // Someone (the node's uid) keeps racing us: give up rather than loop.
        if (attempt >= 5) throw e;
        if (code(e) === 'ELOOP' || code(e) === 'ENOTDIR') await unlink(at).catch(() => undefined);
        else if (code(e) !== 'ENOENT') throw e;
        await mkdir(at, { mode: o.mode }).catch((err) => {
          if (code(err) !== 'EEXIST') throw err;
        });
      }
    }
  } finally {
    await parent.close();
  }
}

/** ensureDirOpen, closed again. */
export async function ensureDir(path: string, o: { mode: number; owner?: Owner }): Promise<void> {
  await (await ensureDirOpen(path, o)).close();
}

/**
 * Sets the mode (and owner) of an existing folder or file; a link there is refused (ELOOP),
 * never followed. O_NONBLOCK: opening a planted FIFO must not hang the agent.
 */
export async function setModeNoFollow(path: string, mode: number, owner?: Owner): Promise<void> {
  const fh = await open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  try {
    if (owner) await fh.chown(owner.uid, owner.gid);
    await fh.chmod(mode);
  } finally {
    await fh.close();
  }
}

/**
 * Gives the tree at the folder `path` to `owner`, children before their folder (a folder
 * becomes the node's, and so writable by it, only once the agent is done inside it). Links are
 * re-owned themselves, never followed; a file with other names (a hard link to a file that is
 * not the node's) is left alone: it is not ours to give away.
 */
export async function chownTree(path: string, owner: Owner): Promise<void> {
  await withDir(path, (dir) => chownIn(dir, owner));
}

async function chownIn(dir: FileHandle, owner: Owner): Promise<void> {
  for (const name of await entries(dir)) {
    const at = inDir(dir, name);
    const st = await lstat(at);
    if (st.isDirectory()) await withDir(at, (sub) => chownIn(sub, owner));
    else if ((st.uid !== owner.uid || st.gid !== owner.gid) && !(st.isFile() && st.nlink > 1)) await lchown(at, owner.uid, owner.gid);
  }
  const st = await dir.stat();
  if (st.uid !== owner.uid || st.gid !== owner.gid) await dir.chown(owner.uid, owner.gid);
}

/** `rm -rf path` that removes links instead of following them, wherever they appear meanwhile. */
export async function removeTree(path: string): Promise<void> {
  let parent: FileHandle;
  try {
    parent = await openDir(dirname(path));
  } catch (e) {
    if (code(e) === 'ENOENT') return;
    throw e;
  }
  try {
    await removeIn(parent, basename(path));
  } finally {
    await parent.close();
  }
}

/** removeTree of the entry `name` of the folder `parent` holds open. */
export async function removeIn(parent: FileHandle, name: string): Promise<void> {
  const at = inDir(parent, name);
  const st = await lstat(at).catch((e) => {
    if (code(e) === 'ENOENT') return undefined;
    throw e;
  });
  if (!st) return;
  if (st.isDirectory()) {
    let dir: FileHandle | undefined;
    try {
      dir = await openDir(at);
    } catch (e) {
      if (code(e) !== 'ELOOP' && code(e) !== 'ENOTDIR' && code(e) !== 'ENOENT') throw e;
    }
    if (dir) {
      try {
        for (const n of await entries(dir)) await removeIn(dir, n);
      } finally {
        await dir.close();
      }
      try {
        await rmdir(at);
        return;
      } catch (e) {
        if (code(e) === 'ENOENT') return;
        if (code(e) !== 'ENOTDIR') throw e;
      }
    }
  }
  await unlink(at).catch((e) => {
    if (code(e) !== 'ENOENT') throw e;
  });
}

/**
 * Opens a regular file for reading without following a link, and only when its owner is
 * `uid` (when given): what a tool running as the node wrote, not a file of the host the node
 * linked there.
 */
export async function openOwnedFile(path: string, uid?: number): Promise<FileHandle> {
  const fh = await open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK);
  const st = await fh.stat();
  if (!st.isFile() || (uid !== undefined && st.uid !== uid)) {
    await fh.close();
    throw new FulcrumError('internal', `${path} is not a file the node wrote`);
  }
  return fh;
}

/**
 * Copies the tree in folder `src` into the existing folder `dest` (folders and regular files
 * only; every file must be owned by `uid` when given), writing new files only, never through
 * a link.
 */
export async function copyTree(src: string, dest: string, uid?: number): Promise<void> {
  await withDir(src, (s) => withDir(dest, (d) => copyIn(s, d, uid)));
}

async function copyIn(src: FileHandle, dest: FileHandle, uid?: number): Promise<void> {
  for (const name of await entries(src)) await copyEntry(src, dest, name, uid);
}

async function copyEntry(src: FileHandle, dest: FileHandle, name: string, uid?: number): Promise<void> {
  const from = inDir(src, name);
  const to = inDir(dest, name);
  const st = await lstat(from);
  if (st.isDirectory()) {
    await mkdir(to, { mode: st.mode & 0o777 });
    await withDir(from, (s) => withDir(to, (d) => copyIn(s, d, uid)));
  } else if (st.isFile()) {
    // Copied from the file opened (its descriptor's path), into a new file (COPYFILE_EXCL is
    // O_EXCL, which refuses a link too), by the kernel's copy (copy_file_range, reflinks).
    const r = await openOwnedFile(from, uid);
    try {
      await copyFile(`/proc/self/fd/${r.fd}`, to, constants.COPYFILE_EXCL);
    } finally {
      await r.close();
    }
  } else {
    throw new FulcrumError('internal', `${name}: only folders and files are copied`);
  }
}

/**
 * Moves every entry of folder `src` into folder `dest`, replacing what `dest` holds under the
 * same names (copied instead across file systems); entries not owned by `uid` (when given) are
 * refused.
 */
export async function moveEntries(src: string, dest: string, uid?: number): Promise<void> {
  await withDir(src, (s) => withDir(dest, async (d) => {
    for (const name of await entries(s)) {
      const st = await lstat(inDir(s, name));
      if (uid !== undefined && st.uid !== uid) throw new FulcrumError('internal', `${name} is not the node's`);
      try {
        await rename(inDir(s, name), inDir(d, name));
      } catch (e) {
        if (!['EISDIR', 'ENOTDIR', 'ENOTEMPTY', 'EEXIST', 'EXDEV'].includes(code(e) ?? '')) throw e;
        await removeIn(d, name);
        if (code(e) === 'EXDEV') await copyEntry(s, d, name, uid);
        else await rename(inDir(s, name), inDir(d, name));
      }
    }
  }));
}
