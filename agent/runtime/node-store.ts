import { existsSync } from 'node:fs';
import { cp, mkdir, readdir, readFile, rename, writeFile } from 'node:fs/promises';
import { connect } from 'node:net';
import { basename, dirname, join } from 'node:path';
import { FulcrumError } from '../../lib/errors.js';
import { substitutePaths, type NodeSpec } from './container-runtime.js';
import { ensureDir, moveEntries, removeTree, writeFileNoFollow, type Owner } from './no-follow.js';

/** Paths the `{{...}}` tokens of a spec are replaced with (host paths, or paths inside a container). */
export interface SubstitutionPaths {
  dataDir: string;
  confDir: string;
  runDir: string;
  socket: string;
}

/**
 * The host-side bookkeeping both runtime adapters share: `root/nodes/<name>/` holding
 * `node.json` (the spec and adapter data; it contains key material, so mode 0600), the option
 * file `my.cnf`, `conf/` (the spec's files) and `run/` (the Unix socket), plus a per-node lock.
 * Contract: `locked` runs calls for one node one after another, whatever each one's outcome;
 * `readMeta` returns undefined for a node without a readable node.json; `writeMeta` replaces it
 * atomically; `names` lists node folders (empty when there is none yet).
 */
export function createNodeStore<M extends { spec: NodeSpec }>(root: string) {
  const nodesDir = join(root, 'nodes');
  const locks = new Map<string, Promise<unknown>>();
  const nodeDir = (name: string) => join(nodesDir, name);

  return {
    nodesDir,
    nodeDir,
    /** Where the node's files are on the host. */
    hostPaths: (name: string) => ({ confDir: join(nodeDir(name), 'conf'), runDir: join(nodeDir(name), 'run'), socket: join(nodeDir(name), 'run', 'mysqld.sock') }),

    validateName(name: string): void {
      if (!/^[a-z0-9][a-z0-9-]{0,62}$/.test(name)) throw new FulcrumError('validation', `invalid node name ${JSON.stringify(name)}`);
    },

    /** Serialises operations per node so that concurrent ensure/stop calls cannot interleave. */
    locked<T>(name: string, fn: () => Promise<T>): Promise<T> {
      const prev = locks.get(name) ?? Promise.resolve();
      const next = prev.then(fn, fn);
      locks.set(name, next.catch(() => undefined));
      return next;
    },

    async readMeta(name: string): Promise<M | undefined> {
      try {
        return JSON.parse(await readFile(join(nodeDir(name), 'node.json'), 'utf8')) as M;
      } catch {
        return undefined;
      }
    },

    async writeMeta(meta: M): Promise<void> {
      const file = join(nodeDir(meta.spec.name), 'node.json');
      await writeFile(`${file}.tmp`, JSON.stringify(meta, null, 1), { mode: 0o600 });
      await rename(`${file}.tmp`, file);
    },

    async names(): Promise<string[]> {
      try {
        return (await readdir(nodesDir)).sort();
      } catch {
        return [];
      }
    },

    /** The last `lines` lines of the server's error log, '' when it has none yet. */
    async errorLogTail(name: string, lines = 50): Promise<string> {
      try {
        const text = await readFile(join(nodeDir(name), 'error.log'), 'utf8');
        return text.split('\n').slice(-lines - 1).join('\n');
      } catch {
        return '';
      }
    },

    /**
     * Writes `conf/` (the spec's files) and `my.cnf` with the spec's path tokens replaced by
     * `paths`, and makes the run dir. `node` is the uid the server runs as (undefined: the
     * agent's own). `conf/` stays the agent's (group NODE_GROUP may only search it), so the
     * node's uid cannot plant anything there; its files, which the server must read, are the
     * node's, mode 0600. The run dir is the node's (its socket, pid file, tmpdir and the
     * tools' scratch folders); `no-files` in it is the agent's. Every write replaces a link it
     * finds instead of following it (no-follow.ts): conf/ was the node's before, and the run
     * dir still is.
     */
    async writeNodeFiles(spec: NodeSpec, paths: SubstitutionPaths, node?: Owner): Promise<void> {
      const hp = this.hostPaths(spec.name);
      const agent = node ? { uid: process.getuid?.() ?? 0, gid: node.gid } : undefined;
      await mkdir(nodeDir(spec.name), { recursive: true, mode: 0o700 });
      await ensureDir(hp.confDir, { mode: node ? 0o710 : 0o700, owner: agent });
      // Only the agent (and the server's own user, see node-user.ts) may reach the socket: it
      // accepts PROXY headers (docs/security/mysql.md). `no-files` is secure_file_priv: empty,
      // and not writable by the server.
      await ensureDir(hp.runDir, { mode: 0o700, owner: node });
      await ensureDir(join(hp.runDir, 'no-files'), { mode: 0o500, owner: agent });
      for (const [file, content] of Object.entries(spec.files)) {
        await writeFileNoFollow(join(hp.confDir, file), substitutePaths(content, paths), { mode: 0o600, owner: node });
      }
      await writeFileNoFollow(join(nodeDir(spec.name), 'my.cnf'), substitutePaths(spec.config, paths), { mode: 0o600, owner: node });
    },
  };
}

/** True when every wanted label has that value. */
export function hasLabels(have: Record<string, string>, want: Record<string, string>): boolean {
  return Object.entries(want).every(([k, v]) => have[k] === v);
}

/**
 * A new node's data dir is a copy of the engine's template (made once per binary or image),
 * which turns a 2-3 s initialisation into a file copy; a data dir that has one is left alone.
 * The copy is made in a fresh folder beside it and moved in entry by entry: the data dir may be
 * the node's, and a link planted in it must be replaced, not written through.
 */
export async function seedDataDir(dataDir: string, template: () => Promise<string>): Promise<void> {
  if (existsSync(join(dataDir, 'mysql'))) return;
  await mkdir(dataDir, { recursive: true });
  const tmp = join(dirname(dataDir), `.${basename(dataDir)}.seed-${process.pid}-${Date.now()}`);
  try {
    await cp(await template(), tmp, { recursive: true });
    await moveEntries(tmp, dataDir);
  } finally {
    await removeTree(tmp);
  }
}

/** A server is ready when its Unix socket answers with a protocol greeting. */
export function greets(socket: string): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(socket);
    const done = (v: boolean) => {
      s.destroy();
      resolve(v);
    };
    s.setTimeout(1000, () => done(false));
    s.once('data', () => done(true));
    s.once('error', () => done(false));
  });
}
