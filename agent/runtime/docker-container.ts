import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, rename, rm } from 'node:fs/promises';
import type Docker from 'dockerode';
import { FulcrumError } from '../../lib/errors.js';
import type { Logger } from '../../lib/logger.js';
import { comparableSpec, type NodeSpec } from './container-runtime.js';
import { frameAt } from './docker-frames.js';

/** Where the node's host directories appear inside its container. */
export const IN = {
  dataDir: '/var/lib/mysql',
  nodeDir: '/fulcrum',
  confDir: '/fulcrum/conf',
  runDir: '/fulcrum/run',
  socket: '/fulcrum/run/mysqld.sock',
} as const;

/**
 * Initialises an empty data dir with root@localhost (empty password, Unix socket only; the
 * agent secures it) using whatever the image ships: mariadb-install-db (MariaDB >= 10.4),
 * mysql_install_db (older MariaDB) or `mysqld --initialize-insecure` (MySQL). This replaces the
 * official images' entrypoints, which insist on a root password from the environment.
 */
const INIT = `set -e
d=${IN.dataDir}
srv="$(command -v mariadbd || command -v mysqld)" || { echo "fulcrum: no mariadbd or mysqld in this image" >&2; exit 127; }
if [ ! -d "$d/mysql" ]; then
  echo "fulcrum: initialising empty data dir" >&2
  if command -v mariadb-install-db >/dev/null 2>&1; then
    mariadb-install-db --no-defaults --datadir="$d" --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve $FULCRUM_USER_OPT >&2
  elif "$srv" --version | grep -q MariaDB; then
    mysql_install_db --no-defaults --datadir="$d" --auth-root-authentication-method=normal --skip-test-db --skip-name-resolve $FULCRUM_USER_OPT >&2
  else
    "$srv" --no-defaults --initialize-insecure --datadir="$d" $FULCRUM_USER_OPT >&2
  fi
fi
`;

/** The node's entrypoint: init if still needed, then exec the server so that it is pid 1 and gets docker's SIGTERM. */
const ENTRY = `${INIT}exec "$srv" "$@"`;

export interface ContainerContext {
  /** The runtime's root, put in a label so that runtimes with different roots never mix. */
  root: string;
  /** Host directory bind-mounted at IN.nodeDir. */
  nodeDir: string;
  uid: number;
  gid: number;
  /** CPUs the daemon's host has; NanoCpus above it is refused by docker. */
  hostCpus: number;
  labels: Record<string, string>;
}

function userOpt(uid: number): string[] {
  // mariadbd refuses to run as root unless told so; any other uid runs as itself.
  return uid === 0 ? ['--user=root'] : [];
}

/** Create options of a node's container: host networking, bind mounts, kernel-enforced limits. */
export function containerOptions(spec: NodeSpec, ctx: ContainerContext): Docker.ContainerCreateOptions {
  const cpus = Math.min(spec.cpus, ctx.hostCpus);
  const bytes = spec.memoryMb * 1024 * 1024;
  return {
    name: spec.name,
    Image: spec.engine.image,
    Entrypoint: ['sh', '-c', ENTRY, 'fulcrum-entry'],
    Cmd: [
      `--defaults-file=${IN.nodeDir}/my.cnf`,
      `--datadir=${IN.dataDir}`,
      `--socket=${IN.socket}`,
      `--pid-file=${IN.runDir}/mysqld.pid`,
      `--port=${spec.port}`,
      `--bind-address=${spec.host}`,
      `--log-error=${IN.nodeDir}/error.log`,
      ...userOpt(ctx.uid),
    ],
    Env: [`FULCRUM_USER_OPT=${userOpt(ctx.uid).join(' ')}`, 'TZ=UTC'],
    User: `${ctx.uid}:${ctx.gid}`,
    Labels: ctx.labels,
    StopTimeout: 30,
    HostConfig: {
      NetworkMode: 'host',
      Binds: [`${spec.dataDir}:${IN.dataDir}`, `${ctx.nodeDir}:${IN.nodeDir}`],
      Memory: bytes,
      // Equal to Memory: no swap beyond the plan's RAM.
      MemorySwap: bytes,
      NanoCpus: Math.max(1, Math.round(cpus * 1e9)),
      RestartPolicy: { Name: 'no' },
      LogConfig: { Type: 'json-file', Config: { 'max-size': '10m', 'max-file': '2' } },
    },
  };
}

/**
 * Makes the image present and returns its id. Production catalogues name registry images
 * (mysql:8.0, mariadb:10.11), so a missing one is pulled; the lab builds its image locally.
 */
export async function ensureImage(docker: Docker, image: string, engineId: string, log: Logger): Promise<string> {
  try {
    return (await docker.getImage(image).inspect()).Id;
  } catch (e) {
    if ((e as { statusCode?: number }).statusCode !== 404) throw new FulcrumError('unavailable', `docker: cannot inspect image ${image}: ${(e as Error).message}`, { cause: e });
  }
  log.info({ image }, 'pulling image');
  try {
    await new Promise<void>((resolve, reject) => {
      docker.pull(image, (err: Error | null, stream: NodeJS.ReadableStream) => {
        if (err) return reject(err);
        docker.modem.followProgress(stream, (e: Error | null) => (e ? reject(e) : resolve()));
      });
    });
    return (await docker.getImage(image).inspect()).Id;
  } catch (e) {
    throw new FulcrumError('invalid_config', `image ${image} of engine ${engineId} is not present and could not be pulled: ${(e as Error).message}`, { cause: e });
  }
}

/**
 * Builds `dir` as a freshly initialised data dir, in a one-off container of the image (no
 * network), so that each node then starts from a file copy instead of a 1-2 s initialisation.
 */
export async function buildTemplate(docker: Docker, image: string, dir: string, uid: number, gid: number): Promise<void> {
  if (existsSync(`${dir}/mysql`)) return;
  const tmp = `${dir}.tmp-${process.pid}-${Date.now()}`;
  await mkdir(tmp, { recursive: true });
  const c = await docker.createContainer({
    Image: image,
    Entrypoint: ['sh', '-c', INIT, 'fulcrum-init'],
    Env: [`FULCRUM_USER_OPT=${userOpt(uid).join(' ')}`],
    User: `${uid}:${gid}`,
    Labels: { 'fulcrum.template': 'true' },
    HostConfig: { NetworkMode: 'none', Binds: [`${tmp}:${IN.dataDir}`] },
  });
  try {
    await c.start();
    const { StatusCode } = (await c.wait()) as { StatusCode: number };
    if (StatusCode !== 0) {
      const out = ((await c.logs({ stdout: true, stderr: true, tail: 15 })) as unknown as Buffer).toString('latin1');
      throw new FulcrumError('internal', `initialising a data dir with ${image} failed (exit ${StatusCode}): ${out.replace(/[\x00-\x08]/g, '').trim()}`);
    }
  } catch (e) {
    await rm(tmp, { recursive: true, force: true });
    throw e;
  } finally {
    await c.remove({ force: true }).catch(() => undefined);
  }
  await rm(dir, { recursive: true, force: true });
  await rename(tmp, dir);
}

/** A short digest of the spec in a canonical order (labels and files sorted), for the container label. */
export function specHash(spec: NodeSpec): string {
  return createHash('sha256').update(JSON.stringify(comparableSpec(spec))).digest('hex').slice(0, 32);
}

export function dockerError(what: string, e: unknown): FulcrumError {
  if (e instanceof FulcrumError) return e;
  const msg = (e as { json?: { message?: string } }).json?.message ?? (e as Error).message ?? String(e);
  return new FulcrumError('unavailable', `docker: ${what}: ${msg}`, { cause: e });
}

/** Docker log output without a TTY is framed (8-byte headers); keep only the text. */
export function stripFrames(buf: Buffer): string {
  if (!Buffer.isBuffer(buf)) return String(buf);
  const parts: Buffer[] = [];
  let i = 0;
  for (let f = frameAt(buf); f?.wellFormed; f = frameAt(buf, i)) {
    parts.push(buf.subarray(f.start, f.end));
    i = f.end;
  }
  return i === 0 ? buf.toString() : Buffer.concat(parts).toString();
}
