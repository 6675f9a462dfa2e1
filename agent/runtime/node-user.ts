import { execFile, execFileSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { chmod, chown, lstat, readdir, writeFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { FulcrumError } from '../../lib/errors.js';
import { LABEL_DATABASE } from './container-runtime.js';

const execFileP = promisify(execFile);

/** The group every node's server runs in; `scripts/install-system-deps.sh` creates it. */
export const NODE_GROUP = 'fulcrum-db';
/**
 * Node uids are `NODE_UID_BASE + database id` (docs/security/mysql.md): one uid per database,
 * far above the ranges distributions and user namespaces hand out, so no login and no other
 * database shares it. They need no passwd entry: the server is started with the numeric ids.
 */
export const NODE_UID_BASE = 1_500_000_000;

/** Who a node's server runs as; undefined: as the agent itself (an agent that is not root). */
export interface NodeUser {
  uid: number;
  gid: number;
}

let group: Promise<number> | undefined;

/** NODE_GROUP's gid when the group exists (at agent start, before any node), else undefined. */
export function existingNodeGroupId(): number | undefined {
  try {
    const gid = Number(execFileSync('getent', ['group', NODE_GROUP], { encoding: 'utf8' }).split(':')[2]);
    return Number.isInteger(gid) ? gid : undefined;
  } catch {
    return undefined;
  }
}

/** The gid of NODE_GROUP, creating the group when the install did not (the README needs no extra step). */
function nodeGroupId(): Promise<number> {
  if (!group) {
    group = (async () => {
      const lookup = async () => {
        try {
          const { stdout } = await execFileP('getent', ['group', NODE_GROUP]);
          return Number(stdout.split(':')[2]);
        } catch {
          return undefined;
        }
      };
      let gid = await lookup();
      if (gid === undefined) {
        await execFileP('groupadd', ['--system', NODE_GROUP]).catch((e: Error) => {
          throw new FulcrumError('internal', `cannot create the group ${NODE_GROUP} the database servers run in: ${e.message}`);
        });
        gid = await lookup();
      }
      if (gid === undefined || !Number.isInteger(gid)) throw new FulcrumError('internal', `group ${NODE_GROUP} has no gid`);
      return gid;
    })();
    group.catch(() => (group = undefined));
  }
  return group;
}

/**
The uid and gid a node with these `labels` must run as: never root. An agent running as root gives each
 * database its own uid in NODE_GROUP; an agent that is not root runs its nodes as itself (it
 * cannot switch users, and is not root either).
 */
export async function nodeUser(labels: Record<string, string>): Promise<NodeUser | undefined> {
  if (process.getuid?.() !== 0) return undefined;
  const id = Number(labels[LABEL_DATABASE]);
  // A node without a database (runtime tests) gets the base uid, shared by all such nodes.
  const offset = Number.isInteger(id) && id > 0 && id < 500_000_000 ? id : 0;
  return { uid: NODE_UID_BASE + offset, gid: await nodeGroupId() };
}

/** Lets `user` reach (not list) `dir`: group NODE_GROUP with search permission. */
export async function shareDir(dir: string, user: NodeUser): Promise<void> {
  const st = await lstat(dir);
  if (st.mode & 0o001) return;
  if (st.gid !== user.gid) await chown(dir, st.uid, user.gid);
  if (!(st.mode & 0o010)) await chmod(dir, (st.mode & 0o7777) | 0o010);
}

/** shareDir for `dir` and every ancestor that others cannot search (the agent's state folders are 0700). */
export async function shareAncestors(dir: string, user: NodeUser): Promise<void> {
  for (let p = dir; ; p = dirname(p)) {
    await shareDir(p, user);
    if (dirname(p) === p) return;
  }
}

async function chownTree(path: string, user: NodeUser): Promise<void> {
  const st = await lstat(path);
  if (st.uid !== user.uid || st.gid !== user.gid) await chown(path, user.uid, user.gid);
  if (st.isDirectory()) for (const e of await readdir(path)) await chownTree(join(path, e), user);
}

/**
 * Gives `user` what its server writes and reads: the data dir (recursively, when it is not
 * already theirs: a data dir from an agent that ran nodes as root, or a fresh template copy),
 * the spec's files, the option file, the error log and the run dir (0700: the Unix socket in it
 * accepts PROXY headers, so only the agent and the server may reach it). The run dir's
 * `no-files` (secure_file_priv) stays the agent's, so the server can neither write nor list it.
 */
export async function handOver(user: NodeUser, p: { dataDir: string; nodeDir: string; confDir: string; runDir: string }): Promise<void> {
  const top = await lstat(p.dataDir);
  const inner = existsSync(join(p.dataDir, 'mysql')) ? await lstat(join(p.dataDir, 'mysql')) : top;
  if (top.uid !== user.uid || inner.uid !== user.uid) await chownTree(p.dataDir, user);
  await chmod(p.dataDir, 0o700);
  await chownTree(p.confDir, user);
  for (const f of ['my.cnf', 'error.log']) {
    const file = join(p.nodeDir, f);
    if (!existsSync(file)) await writeFile(file, '', { mode: 0o600 });
    await chown(file, user.uid, user.gid);
  }
  await chown(p.runDir, user.uid, user.gid);
  await chmod(p.runDir, 0o700);
  await shareDir(p.nodeDir, user);
}
