import { execFile, execFileSync } from 'node:child_process';
import { constants } from 'node:fs';
import { lstat, open } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { FulcrumError } from '../../lib/errors.js';
import { LABEL_DATABASE } from './container-runtime.js';
import { chownTree, openDir, setModeNoFollow } from './no-follow.js';

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

/**
 * Lets `user` reach (not list) `dir`: group NODE_GROUP with search permission. A link is left as
 * it is (what it points to is for its own owner to share), and the change goes through the
 * opened folder, so a link swapped in meanwhile is not followed.
 */
export async function shareDir(dir: string, user: NodeUser): Promise<void> {
  if ((await lstat(dir)).isSymbolicLink()) return;
  const fh = await openDir(dir);
  try {
    const st = await fh.stat();
    if (st.mode & 0o001) return;
    if (st.gid !== user.gid) await fh.chown(st.uid, user.gid);
    if (!(st.mode & 0o010)) await fh.chmod((st.mode & 0o7777) | 0o010);
  } finally {
    await fh.close();
  }
}

/** shareDir for `dir` and every ancestor that others cannot search (the agent's state folders are 0700). */
export async function shareAncestors(dir: string, user: NodeUser): Promise<void> {
  for (let p = dir; ; p = dirname(p)) {
    await shareDir(p, user);
    if (dirname(p) === p) return;
  }
}

/**
 * Gives `user` what its server writes: the data dir (recursively, when it is not already
 * theirs: a data dir from an agent that ran nodes as root, or a fresh template copy) and the
 * error log, and lets it reach the node folder. The option file, `conf/` and the run dir got
 * their owners when they were written (node-store.ts writeNodeFiles). Nothing here follows a
 * link the node's uid may have planted in its own folders (no-follow.ts).
 */
export async function handOver(user: NodeUser, p: { dataDir: string; nodeDir: string }): Promise<void> {
  const top = await lstat(p.dataDir);
  const inner = await lstat(join(p.dataDir, 'mysql')).catch(() => top);
  if (top.uid !== user.uid || inner.uid !== user.uid) await chownTree(p.dataDir, user);
  await setModeNoFollow(p.dataDir, 0o700);
  // The node folder is the agent's, so nothing can be planted here; O_NOFOLLOW all the same.
  const log = await open(join(p.nodeDir, 'error.log'), constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
  try {
    await log.chown(user.uid, user.gid);
  } finally {
    await log.close();
  }
  await shareDir(p.nodeDir, user);
}
