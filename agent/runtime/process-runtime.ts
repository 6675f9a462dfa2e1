import { execFile, spawn } from 'node:child_process';
import { closeSync, constants, existsSync, openSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import { promisify } from 'node:util';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { sameSpec, type ContainerRuntime, type NodeSpec, type NodeStatus } from './container-runtime.js';
import { createNodeStore, greets, hasLabels, seedDataDir } from './node-store.js';
import { handOver, nodeUser, shareAncestors } from './node-user.js';
import { ensureDir, removeTree } from './no-follow.js';
import { processesWithArg, runsWith } from '../../lib/processes.js';

const execFileP = promisify(execFile);
/** mariadbd sets its own file modes from UMASK/UMASK_DIR (default 0660): owner-only instead (docs/security/secrets.md). */
const PRIVATE_FILES = { UMASK: '0600', UMASK_DIR: '0700' };

interface NodeMeta {
  spec: NodeSpec;
  pid?: number;
  startedAt?: number;
}

/**
 * ContainerRuntime adapter running each node as a local `mariadbd` process (docs/agent.md §2).
 *
 * Layout under `root`: `nodes/<name>/{node.json, my.cnf, conf/, run/, error.log}` and
 * `templates/<version>/` (a data dir made once by mariadb-install-db and copied per node,
 * which turns a 2-3 s initialisation into a file copy). Processes are spawned detached in their
 * own session so that they outlive the agent; `node.json` records the pid, and a pid counts as
 * ours only while its command line names our option file (pids are reused).
 *
 * The server runs as its database's own unprivileged uid (agent/runtime/node-user.ts) when the
 * agent is root, else as the agent's user.
 *
 * Limits: `memoryMb` is applied through the rendered server config (buffer pool), not by the
 * kernel; `cpus` is not enforced. The docker adapter enforces both.
 */
export function createProcessRuntime(opts: { root: string; logger: Logger }): ContainerRuntime {
  const log = opts.logger.child({ component: 'process-runtime' });
  const store = createNodeStore<NodeMeta>(opts.root);
  const { nodeDir, locked, readMeta, writeMeta, validateName } = store;
  const templates = new Map<string, Promise<string>>();
  const paths = (spec: NodeSpec) => ({ dataDir: spec.dataDir, ...store.hostPaths(spec.name) });

  function alive(meta: NodeMeta | undefined): boolean {
    return !!meta?.pid && runsWith(meta.pid, join(nodeDir(meta.spec.name), 'my.cnf'));
  }

  function toolPath(binary: string, tool: string): string {
    // The server itself (a bootstrap run on a fork's copy, physical-seed.ts): the node's own binary.
    if (tool === 'mariadbd') return binary;
    const candidate = join(dirname(dirname(binary)), 'bin', tool);
    return existsSync(candidate) ? candidate : tool;
  }

  async function template(spec: NodeSpec): Promise<string> {
    const binary = spec.engine.binary!;
    const key = `${basename(binary)}-${spec.engine.version}`.replace(/[^A-Za-z0-9.-]/g, '_');
    let p = templates.get(key);
    if (!p) {
      p = (async () => {
        const dir = join(opts.root, 'templates', key);
        if (existsSync(join(dir, 'mysql'))) return dir;
        const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
        await mkdir(tmp, { recursive: true });
        const installDb = toolPath(binary, 'mariadb-install-db');
        // A small redo log keeps each node's copy small (the default is 96 MiB); the server
        // resizes it at start to what the node's config asks for.
        // The bootstrap server gets a private tmpdir too: another server starting meanwhile would
        // delete its temporary tables from a shared /tmp and the bootstrap would fail.
        const bootTmp = `${tmp}.tmpdir`;
        await mkdir(bootTmp, { recursive: true, mode: 0o700 });
        const args = ['--no-defaults', `--datadir=${tmp}`, '--auth-root-authentication-method=normal', '--skip-test-db', '--skip-name-resolve', '--innodb-log-file-size=8M', `--tmpdir=${bootTmp}`];
        if (process.getuid?.() === 0) args.push('--user=root');
        try {
          await execFileP(installDb, args, { timeout: 120_000, env: { ...process.env, ...PRIVATE_FILES } });
        } finally {
          await rm(bootTmp, { recursive: true, force: true });
        }
        await rm(dir, { recursive: true, force: true });
        await rename(tmp, dir);
        return dir;
      })();
      templates.set(key, p);
      p.catch(() => templates.delete(key));
    }
    return p;
  }

  const tail = store.errorLogTail;

  async function waitFor(cond: () => boolean | Promise<boolean>, timeoutMs: number, stepMs = 50): Promise<boolean> {
    const end = Date.now() + timeoutMs;
    while (Date.now() < end) {
      if (await cond()) return true;
      await new Promise((r) => setTimeout(r, stepMs));
    }
    return cond();
  }

  async function launch(spec: NodeSpec, timeoutMs: number): Promise<NodeMeta> {
    const p = paths(spec);
    const dir = nodeDir(spec.name);
    // Never root (docs/security/mysql.md): the server gets its database's own uid.
    const user = await nodeUser(spec.labels);
    await store.writeNodeFiles(spec, p, user);
    const cnf = join(dir, 'my.cnf');
    // One server per data directory, ever (two corrupt it, and the old one's socket would answer
    // for the new one): a server no node.json names any more, such as one spawned just before
    // an agent stopped and before its pid was recorded, is stopped first.
    const datadirArg = `--datadir=${spec.dataDir}`;
    for (const pid of processesWithArg(spec.engine.binary!, datadirArg)) {
      log.warn({ node: spec.name, pid }, 'stopping a server left on the data directory');
      await stopPid(pid, () => runsWith(pid, datadirArg), 'SIGTERM', 30_000, spec.name);
    }
    await seedDataDir(spec.dataDir, () => template(spec));
    // The agent's folders on the way to the server's files become searchable (not listable) by its group.
    if (user) {
      await handOver(user, { dataDir: spec.dataDir, nodeDir: dir });
      await shareAncestors(dirname(spec.dataDir), user);
      await shareAncestors(dirname(dir), user);
      // The binary too: an operator's build may sit in a folder only root can search.
      await shareAncestors(dirname(spec.engine.binary!), user);
    }
    // Its own tmpdir: a MariaDB server deletes every `#sql*` file in its tmpdir when it starts
    // (its own leftovers, it assumes), so servers sharing /tmp destroy each other's on-disk
    // temporary tables mid-query (docs/agent.md, "Process runtime").
    const tmpDir = join(p.runDir, 'tmp');
    await ensureDir(tmpDir, { mode: 0o700, owner: user });
    const errLog = join(dir, 'error.log');
    const args = [
      `--defaults-file=${cnf}`,
      datadirArg,
      `--socket=${p.socket}`,
      `--pid-file=${join(p.runDir, 'mysqld.pid')}`,
      `--port=${spec.port}`,
      `--bind-address=${spec.host}`,
      `--log-error=${errLog}`,
      `--tmpdir=${tmpDir}`,
    ];
    const out = openSync(errLog, constants.O_WRONLY | constants.O_APPEND | constants.O_CREAT | constants.O_NOFOLLOW, 0o600);
    const child = spawn(spec.engine.binary!, args, {
      detached: true, stdio: ['ignore', out, out], env: { ...process.env, ...PRIVATE_FILES }, ...(user ? { uid: user.uid, gid: user.gid } : {}),
    });
    closeSync(out);
    // Listeners first: a binary that cannot be executed emits 'error' on the next tick, and is
    // reported like a server that exits at once.
    let exited = false;
    let spawnError = '';
    child.once('exit', () => (exited = true));
    child.once('error', (err) => {
      exited = true;
      spawnError = err.message;
    });
    child.unref();
    const meta: NodeMeta = { spec, pid: child.pid, startedAt: Date.now() };
    await writeMeta(meta);
    const ok = await waitFor(async () => exited || (await greets(p.socket)), timeoutMs);
    if (!ok || exited || !alive(meta)) {
      if (!exited && child.pid) {
        try {
          process.kill(child.pid, 'SIGKILL');
        } catch {
          // Already gone.
        }
        // Gone before the next attempt starts another server on the same data directory.
        await waitFor(() => exited || !alive(meta), 10_000);
      }
      throw new FulcrumError('internal', `node ${spec.name} did not start: ${spawnError || (await tail(spec.name, 15)).trim() || 'no output'}`);
    }
    log.debug({ node: spec.name, pid: child.pid }, 'node started');
    return meta;
  }

  /**
   * Stops one server: `signal`, then SIGKILL after `graceMs`. Fails if it still runs after that,
   * so that nothing is started on its data directory meanwhile.
   */
  async function stopPid(pid: number, running: () => boolean, signal: NodeJS.Signals, graceMs: number, name: string): Promise<void> {
    if (!running()) return;
    try {
      process.kill(pid, signal);
    } catch {
      return;
    }
    if (await waitFor(() => !running(), graceMs)) return;
    try {
      process.kill(pid, 'SIGKILL');
    } catch {
      // Gone between the check and the kill.
    }
    if (!(await waitFor(() => !running(), 10_000))) throw new FulcrumError('internal', `node ${name}: server ${pid} did not exit after SIGKILL`);
  }

  function terminate(meta: NodeMeta, signal: NodeJS.Signals, graceMs: number): Promise<void> {
    return meta.pid ? stopPid(meta.pid, () => alive(meta), signal, graceMs, meta.spec.name) : Promise.resolve();
  }

  function status(name: string, meta: NodeMeta | undefined): NodeStatus {
    if (!meta) return { name, state: 'missing', labels: {} };
    const running = alive(meta);
    return { name, state: running ? 'running' : 'stopped', labels: meta.spec.labels, spec: meta.spec, ref: running ? String(meta.pid) : undefined };
  }

  return {
    kind: 'process',

    ensure(spec, o) {
      validateName(spec.name);
      if (!spec.engine.binary) throw new FulcrumError('invalid_config', `engine ${spec.engine.id} has no binary for the process runtime`);
      return locked(spec.name, async () => {
        const meta = await readMeta(spec.name);
        if (meta && alive(meta)) {
          if (sameSpec(meta.spec, spec)) return status(spec.name, meta);
          await terminate(meta, 'SIGTERM', 30_000);
        }
        return status(spec.name, await launch(spec, o?.timeoutMs ?? 60_000));
      });
    },

    start(name, o) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        if (!meta) throw FulcrumError.notFound();
        if (!alive(meta)) await launch(meta.spec, o?.timeoutMs ?? 60_000);
      });
    },

    stop(name, o) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        if (meta) await terminate(meta, 'SIGTERM', o?.graceMs ?? 30_000);
      });
    },

    kill(name) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        if (meta) await terminate(meta, 'SIGKILL', 5_000);
      });
    },

    remove(name, o) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        if (meta) await terminate(meta, 'SIGTERM', 30_000);
        // Both hold the node's folders: removed without following what it may have linked there.
        if (meta && o?.withData) await removeTree(meta.spec.dataDir);
        await removeTree(nodeDir(name));
      });
    },

    async inspect(name) {
      return status(name, await readMeta(name));
    },

    async list(labels) {
      const out: NodeStatus[] = [];
      for (const name of await store.names()) {
        const meta = await readMeta(name);
        if (meta && hasLabels(meta.spec.labels, labels)) out.push(status(name, meta));
      }
      return out;
    },

    async connection(name) {
      const meta = await readMeta(name);
      if (!meta) throw FulcrumError.notFound();
      return { host: meta.spec.host, port: meta.spec.port, socketPath: paths(meta.spec).socket };
    },

    logs: tail,

    async prepare(engine) {
      if (engine.binary) await template({ engine } as NodeSpec);
    },

    async exec(name, argv, io) {
      const meta = await readMeta(name);
      if (!meta) throw FulcrumError.notFound();
      const [tool, ...rest] = argv;
      if (!tool) throw new FulcrumError('validation', 'exec needs a program');
      if (io?.stdout && io.stdoutFd !== undefined) throw new FulcrumError('validation', 'exec takes stdout or stdoutFd, not both');
      const socket = io?.noSocket ? [] : [`--socket=${paths(meta.spec).socket}`];
      io?.signal?.throwIfAborted();
      // As the node's uid, never the agent's (docs/security/mysql.md, "Client tools run as the
      // node"): the SQL a tool replays comes from backups and binlogs the tenant wrote, and can
      // make a client read local files (LOAD DATA LOCAL INFILE) or run commands (`system`).
      // It can reach what the server can: its socket, data dir and run dir. Its cwd is the run
      // dir, not wherever the agent was started.
      const user = await nodeUser(meta.spec.labels);
      // A file for stdout is the program's own descriptor: it writes at the disk's pace, however
      // busy the agent's event loop is (a pipe holds 64 KB, then the program waits for us).
      const child = spawn(toolPath(meta.spec.engine.binary!, tool), [...socket, ...rest], {
        stdio: ['pipe', io?.stdoutFd ?? 'pipe', 'pipe'],
        env: { ...process.env, ...(io?.env ?? {}) },
        ...(user ? { uid: user.uid, gid: user.gid, cwd: paths(meta.spec).runDir } : {}),
      });
      // stdin and stderr are pipes; stdout is one unless it is the caller's file.
      const input = child.stdin!;
      const output = child.stdout;
      let stdout = '';
      let stderr = '';
      if (io?.stdout && output) {
        const sink = io.stdout as NodeJS.WritableStream & { writableFinished?: boolean };
        output.pipe(sink);
        // A sink that fails (a full disk) fails the run: the program is stopped and the error
        // named. Left unlistened, pipe() would rethrow it as an uncaught error that ends the agent.
        sink.on('error', (err: Error) => {
          stderr += `output failed: ${err.message}\n`;
          if (child.exitCode === null) child.kill('SIGTERM');
        });
        // A consumer that gave up (destroyed its stream) stops the program instead of leaving
        // it blocked on a full pipe.
        sink.once('close', () => {
          if (!sink.writableFinished && child.exitCode === null) child.kill('SIGTERM');
        });
      } else output?.on('data', (d: Buffer) => (stdout += d.toString()));
      child.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
      // The program may exit before reading all of its input (an SQL error); the broken pipe is
      // its failure to report through the exit code, not an agent crash.
      input.on('error', () => undefined);
      if (io?.stdin) {
        // Input that breaks half way must not look like a complete one: the program is stopped
        // instead of seeing EOF, so it fails.
        io.stdin.once('error', (err: Error) => {
          stderr += `input failed: ${err.message}\n`;
          child.kill('SIGTERM');
        });
        // An input that failed before we got here never emits again: stop rather than hang.
        if ((io.stdin as NodeJS.ReadableStream & { destroyed?: boolean }).destroyed) {
          stderr += 'input failed before the program started\n';
          child.kill('SIGTERM');
        } else io.stdin.pipe(input);
      } else input.end();
      // A cancelled program gets SIGTERM, and SIGKILL if it has not gone a few seconds later:
      // whoever cancelled waits for it before stopping the server it reads.
      let killer: NodeJS.Timeout | undefined;
      const cancel = () => {
        stderr += 'cancelled\n';
        child.kill('SIGTERM');
        killer = setTimeout(() => child.kill('SIGKILL'), 5000);
      };
      io?.signal?.addEventListener('abort', cancel, { once: true });
      try {
        const exitCode = await new Promise<number>((resolve, reject) => {
          child.once('error', reject);
          child.once('close', (code) => resolve(code ?? 1));
        });
        return { exitCode, stdout, stderr };
      } finally {
        io?.signal?.removeEventListener('abort', cancel);
        clearTimeout(killer);
      }
    },

    async close() {
      // Nodes outlive the agent by design; nothing to release.
    },
  };
}
