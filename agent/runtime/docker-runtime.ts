import { existsSync } from 'node:fs';
import { mkdir } from 'node:fs/promises';
import { join } from 'node:path';
import Docker from 'dockerode';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import type { ContainerRuntime, NodeSpec, NodeStatus } from './container-runtime.js';
import { createNodeStore, greets, hasLabels, seedDataDir } from './node-store.js';
import { buildTemplate, containerOptions, dockerError, ensureImage, IN, specHash, stripFrames } from './docker-container.js';
import { dockerExec } from './docker-exec.js';
import { handOver, nodeUser } from './node-user.js';
import { removeTree } from './no-follow.js';

/** Adapter-owned labels, next to the spec's own labels on every container. */
const LABEL_RUNTIME = 'fulcrum.runtime';
const LABEL_ROOT = 'fulcrum.runtime-root';
const LABEL_SPEC_HASH = 'fulcrum.spec-hash';

/** Client tools under their MySQL names, for images (mysql:8.0) that lack the MariaDB names. */
const TOOL_ALIASES: Record<string, string> = { 'mariadb-dump': 'mysqldump', mariadb: 'mysql', 'mariadb-admin': 'mysqladmin' };

interface NodeMeta {
  spec: NodeSpec;
}

/**
 * ContainerRuntime adapter running each node as one Docker container (docs/agent.md §2, docs/docker.md).
 *
 * The container is named `spec.name` and carries the spec labels plus the adapter's own
 * (runtime, root, spec hash), uses host networking so that the server listens on
 * `spec.host:spec.port` exactly like a local process, bind-mounts `spec.dataDir` and a node
 * directory `root/nodes/<name>` (option file, CONF_DIR, RUN_DIR with the Unix socket, error log)
 * and runs as its database's own unprivileged uid when the agent is root (agent/runtime/node-user.ts),
 * else as the agent's uid:gid. Memory
 * and CPU limits are enforced by the kernel (cgroups); the restart policy is `no` because the
 * agent reconciles. `node.json` in the node directory keeps the full spec (it holds key
 * material, so it stays on the host with mode 0600 rather than in container labels); the
 * container's spec-hash label says which spec it runs, so a crash between writing one and
 * re-creating the other cannot leave a stale container looking current. An empty data dir is
 * filled from a per-image template (made once in a one-off container) by a file copy.
 */
export function createDockerRuntime(o: { root?: string; stateDir?: string; logger: Logger; docker?: Docker }): ContainerRuntime {
  // `root` as in the process runtime; `stateDir` (the agent's state dir) is accepted too, giving `<stateDir>/runtime`.
  if (!o.root && !o.stateDir) throw new FulcrumError('invalid_config', 'docker runtime needs a root directory');
  const opts = { ...o, root: o.root ?? join(o.stateDir!, 'runtime') };
  const log = opts.logger.child({ component: 'docker-runtime' });
  const docker = opts.docker ?? new Docker({ socketPath: process.env.DOCKER_SOCKET ?? '/var/run/docker.sock' });
  const store = createNodeStore<NodeMeta>(opts.root);
  const { nodeDir, hostPaths, locked, readMeta, writeMeta, validateName } = store;
  const toolNames = new Map<string, string>();
  const templates = new Map<string, Promise<string>>();
  const builtTemplates = new Set<string>();
  let hostCpus: Promise<number> | undefined;
  const uid = process.getuid?.() ?? 0;
  const gid = process.getgid?.() ?? 0;

  /** The container's inspect data, or undefined when there is none under that name. */
  async function inspectContainer(name: string): Promise<Docker.ContainerInspectInfo | undefined> {
    try {
      return await docker.getContainer(name).inspect();
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode === 404) return undefined;
      throw new FulcrumError('unavailable', `docker: cannot inspect ${name}: ${(e as Error).message}`, { cause: e });
    }
  }

  function maxCpus(): Promise<number> {
    if (!hostCpus) {
      hostCpus = docker.info().then((i: { NCPU?: number }) => i.NCPU ?? 1);
      hostCpus.catch(() => (hostCpus = undefined));
    }
    return hostCpus;
  }

  async function tail(name: string, lines = 50): Promise<string> {
    const fromLog = await store.errorLogTail(name, lines);
    if (fromLog.trim()) return fromLog;
    // No error log yet: the server may have failed before opening it.
    try {
      const buf = (await docker.getContainer(name).logs({ stdout: true, stderr: true, tail: lines })) as unknown as Buffer;
      return stripFrames(buf).split('\n').slice(-lines - 1).join('\n');
    } catch {
      return '';
    }
  }

  /** Waits for the server's greeting on its socket, giving up early if the container exits. */
  async function waitReady(name: string, timeoutMs: number): Promise<void> {
    const socket = hostPaths(name).socket;
    const end = Date.now() + timeoutMs;
    let nextInspect = 0;
    while (Date.now() < end) {
      if (await greets(socket)) return;
      if (Date.now() >= nextInspect) {
        const info = await inspectContainer(name);
        if (!info?.State.Running) break;
        nextInspect = Date.now() + 500;
      }
      await new Promise((r) => setTimeout(r, 100));
    }
    if (await greets(socket)) return;
    const logs = (await tail(name, 15)).trim();
    // The contract leaves a node that failed to start stopped, not half-running.
    await docker.getContainer(name).kill().catch(() => undefined);
    await docker.getContainer(name).wait({ condition: 'not-running' }).catch(() => undefined);
    throw new FulcrumError('internal', `node ${name} did not start: ${logs || 'no log output'}`);
  }

  async function writeNodeFiles(spec: NodeSpec): Promise<void> {
    await store.writeNodeFiles(spec, { dataDir: IN.dataDir, confDir: IN.confDir, runDir: IN.runDir, socket: IN.socket }, await nodeUser(spec.labels));
    await mkdir(spec.dataDir, { recursive: true });
    await writeMeta({ spec });
    await handOverFiles(spec);
  }

  /**
   * Gives the node's files to the uid its server runs as (never root: docs/security/mysql.md).
   * Bind mounts are resolved by the daemon, so unlike the process runtime no host ancestor
   * needs to be searchable.
   */
  async function handOverFiles(spec: NodeSpec): Promise<void> {
    const user = await nodeUser(spec.labels);
    if (user) await handOver(user, { dataDir: spec.dataDir, nodeDir: nodeDir(spec.name) });
  }

  /** A fresh data dir per image, made once and copied to each new node (see buildTemplate). */
  function template(image: string, imageId: string): Promise<string> {
    const dir = join(opts.root, 'templates', imageId.replace(/^sha256:/, '').slice(0, 16));
    let p = templates.get(dir);
    // Rebuilt when someone cleaned the runtime root behind our back (never while a build runs).
    if (!p || (builtTemplates.has(dir) && !existsSync(join(dir, 'mysql')))) {
      builtTemplates.delete(dir);
      p = buildTemplate(docker, image, dir, uid, gid).then(() => {
        builtTemplates.add(dir);
        return dir;
      });
      templates.set(dir, p);
      p.catch(() => templates.delete(dir));
    }
    return p;
  }

  async function createContainer(spec: NodeSpec): Promise<Docker.Container> {
    const image = spec.engine.image!;
    const imageId = await ensureImage(docker, image, spec.engine.id, log);
    await seedDataDir(spec.dataDir, () => template(image, imageId));
    await handOverFiles(spec);
    const user = (await nodeUser(spec.labels)) ?? { uid, gid };
    const hostCpus = await maxCpus();
    if (spec.cpus > hostCpus) log.warn({ node: spec.name, cpus: spec.cpus, granted: hostCpus }, 'cpu limit capped at the host cpu count');
    const labels = { ...spec.labels, [LABEL_RUNTIME]: 'docker', [LABEL_ROOT]: opts.root, [LABEL_SPEC_HASH]: specHash(spec) };
    const options = containerOptions(spec, { root: opts.root, nodeDir: nodeDir(spec.name), uid: user.uid, gid: user.gid, hostCpus, labels });
    return docker.createContainer(options).catch((e) => {
      throw dockerError(`cannot create container ${spec.name}`, e);
    });
  }

  async function launch(spec: NodeSpec, timeoutMs: number): Promise<void> {
    await writeNodeFiles(spec);
    const c = await createContainer(spec);
    await c.start().catch((e) => {
      throw dockerError(`cannot start container ${spec.name}`, e);
    });
    await waitReady(spec.name, timeoutMs);
    log.debug({ node: spec.name, id: c.id }, 'node started');
  }

  async function stopContainer(name: string, graceMs: number): Promise<void> {
    const info = await inspectContainer(name);
    if (!info?.State.Running) return;
    try {
      await docker.getContainer(name).stop({ t: Math.max(1, Math.ceil(graceMs / 1000)) });
    } catch (e) {
      const code = (e as { statusCode?: number }).statusCode;
      if (code !== 304 && code !== 404) throw dockerError(`cannot stop ${name}`, e);
    }
  }

  async function removeContainer(name: string): Promise<void> {
    try {
      await docker.getContainer(name).remove({ force: true, v: true });
    } catch (e) {
      if ((e as { statusCode?: number }).statusCode !== 404) throw dockerError(`cannot remove ${name}`, e);
    }
  }

  function status(name: string, info: Docker.ContainerInspectInfo | undefined, meta: NodeMeta | undefined): NodeStatus {
    if (!info && !meta) return { name, state: 'missing', labels: {} };
    const running = Boolean(info?.State.Running);
    const labels = meta?.spec.labels ?? ownLabelsRemoved(info?.Config.Labels ?? {});
    let detail: string | undefined;
    if (info && !running && info.State.FinishedAt && !info.State.FinishedAt.startsWith('0001')) {
      detail = info.State.OOMKilled ? 'killed: out of memory' : `exited with code ${info.State.ExitCode}`;
    }
    return { name, state: running ? 'running' : 'stopped', labels, spec: meta?.spec, ref: info?.Id, ...(detail ? { detail } : {}) };
  }

  /** The tool's name in this node's image (probed once per image). */
  async function toolFor(name: string, imageId: string, tool: string, user: string): Promise<string> {
    const alias = TOOL_ALIASES[tool];
    if (!alias) return tool;
    const key = `${imageId} ${tool}`;
    let chosen = toolNames.get(key);
    if (!chosen) {
      const probe = await dockerExec(docker.getContainer(name), [tool, '--version'], { user });
      chosen = probe.exitCode === 126 || probe.exitCode === 127 ? alias : tool;
      toolNames.set(key, chosen);
    }
    return chosen;
  }

  return {
    kind: 'docker',

    ensure(spec, o) {
      validateName(spec.name);
      if (!spec.engine.image) throw new FulcrumError('invalid_config', `engine ${spec.engine.id} has no image for the docker runtime`);
      return locked(spec.name, async () => {
        const timeoutMs = o?.timeoutMs ?? 60_000;
        const info = await inspectContainer(spec.name);
        if (info && info.Config.Labels?.[LABEL_SPEC_HASH] === specHash(spec)) {
          // The container is the truth; a lost node.json (host dir cleaned) is rewritten from the spec.
          if (!(await readMeta(spec.name))) {
            await mkdir(nodeDir(spec.name), { recursive: true });
            await writeMeta({ spec });
          }
          if (!info.State.Running) {
            await writeNodeFiles(spec);
            await docker.getContainer(spec.name).start().catch((e) => {
              throw dockerError(`cannot start container ${spec.name}`, e);
            });
            await waitReady(spec.name, timeoutMs);
          }
        } else {
          if (info) {
            await stopContainer(spec.name, 30_000);
            await removeContainer(spec.name);
          }
          await launch(spec, timeoutMs);
        }
        return status(spec.name, await inspectContainer(spec.name), await readMeta(spec.name));
      });
    },

    start(name, o) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        if (!meta) throw FulcrumError.notFound();
        const info = await inspectContainer(name);
        if (info?.State.Running) return;
        if (!info) return launch(meta.spec, o?.timeoutMs ?? 60_000);
        await docker.getContainer(name).start().catch((e) => {
          throw dockerError(`cannot start container ${name}`, e);
        });
        await waitReady(name, o?.timeoutMs ?? 60_000);
      });
    },

    stop(name, o) {
      return locked(name, () => stopContainer(name, o?.graceMs ?? 30_000));
    },

    kill(name) {
      return locked(name, async () => {
        const info = await inspectContainer(name);
        if (!info?.State.Running) return;
        await docker
          .getContainer(name)
          .kill({ signal: 'SIGKILL' })
          .catch((e) => {
            if (![404, 409].includes((e as { statusCode?: number }).statusCode ?? 0)) throw dockerError(`cannot kill ${name}`, e);
          });
        // kill returns once the signal is sent; the contract resolves only when the node is down.
        await docker.getContainer(name).wait({ condition: 'not-running' }).catch(() => undefined);
      });
    },

    remove(name, o) {
      return locked(name, async () => {
        const meta = await readMeta(name);
        await stopContainer(name, 30_000);
        await removeContainer(name);
        // Both hold the node's folders: removed without following what it may have linked there.
        if (meta && o?.withData) await removeTree(meta.spec.dataDir);
        await removeTree(nodeDir(name));
      });
    },

    async inspect(name) {
      return status(name, await inspectContainer(name), await readMeta(name));
    },

    async list(labels) {
      const filters = { label: [`${LABEL_ROOT}=${opts.root}`, ...Object.entries(labels).map(([k, v]) => `${k}=${v}`)] };
      const containers = await docker.listContainers({ all: true, filters: JSON.stringify(filters) }).catch((e) => {
        throw dockerError('cannot list containers', e);
      });
      const names = new Set(containers.map((c) => (c.Names[0] ?? '').replace(/^\//, '')).filter(Boolean));
      // A node whose container vanished (docker rm by hand) is still ours: it is stopped, not gone.
      for (const dir of await store.names()) {
        if (names.has(dir)) continue;
        const meta = await readMeta(dir);
        if (meta && hasLabels(meta.spec.labels, labels)) names.add(dir);
      }
      const out: NodeStatus[] = [];
      for (const name of [...names].sort()) out.push(status(name, await inspectContainer(name), await readMeta(name)));
      return out;
    },

    async connection(name) {
      const meta = await readMeta(name);
      if (!meta) throw FulcrumError.notFound();
      return { host: meta.spec.host, port: meta.spec.port, socketPath: hostPaths(name).socket };
    },

    logs: tail,

    async exec(name, argv, io) {
      const [tool, ...rest] = argv;
      if (!tool) throw new FulcrumError('validation', 'exec needs a program');
      if (io?.stdout && io.stdoutFd !== undefined) throw new FulcrumError('validation', 'exec takes stdout or stdoutFd, not both');
      const info = await inspectContainer(name);
      if (!info) throw FulcrumError.notFound();
      if (!info.State.Running) throw new FulcrumError('conflict', `node ${name} is not running`);
      // As the node's uid, as its server runs (docs/security/mysql.md, "Client tools run as the
      // node"): root in the container could read node.json, which holds the node's keys.
      const node = await nodeUser(info.Config.Labels ?? {});
      const user = node ? `${node.uid}:${node.gid}` : `${uid}:${gid}`;
      const program = await toolFor(name, info.Image, tool, user);
      try {
        return await dockerExec(docker.getContainer(name), [program, ...(io?.noSocket ? [] : [`--socket=${IN.socket}`]), ...rest], { ...io, user });
      } catch (e) {
        throw dockerError(`cannot exec ${program} in ${name}`, e);
      }
    },

    async close() {
      // Nodes outlive the agent by design; dockerode holds no persistent connection.
    },
  };
}

function ownLabelsRemoved(labels: Record<string, string>): Record<string, string> {
  const { [LABEL_RUNTIME]: _r, [LABEL_ROOT]: _o, [LABEL_SPEC_HASH]: _h, ...rest } = labels;
  return rest;
}
