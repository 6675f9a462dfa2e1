/**
 * The docker adapter of ContainerRuntime: the shared contract suite, then what only a container
 * runtime promises (kernel-enforced limits, host networking, labels, streaming exec, clean
 * failure). Needs a running dockerd and the lab image; scripts/test-all.sh prepares both, and
 * when run alone this file runs the same scripts first (as root), failing (never skipping) with
 * their output if that does not work.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { PassThrough, Readable } from 'node:stream';
import { promisify } from 'node:util';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { silentLogger } from '../../../lib/logger.js';
import { FulcrumError } from '../../../lib/errors.js';
import { LABEL_AGENT, LABEL_DATABASE, LABEL_MANAGED, LABEL_NODE, type NodeSpec } from '../../../agent/runtime/container-runtime.js';
import { createDockerRuntime } from '../../../agent/runtime/docker-runtime.js';
import { dockerExec } from '../../../agent/runtime/docker-exec.js';
import { detectDockerCatalogue } from '../../../agent/runtime/docker-catalogue.js';
import { freePort, runtimeContract } from './runtime-contract.js';

const run = promisify(execFile);
// FULCRUM_MYSQL_IMAGE is shared with scripts/build-mysql-image.sh (a scratch repository for trying the build).
const IMAGE = `${process.env.FULCRUM_MYSQL_IMAGE ?? 'fulcrum/mariadb'}:10.11`;
const docker = new Docker({ socketPath: '/var/run/docker.sock' });
const repo = join(import.meta.dirname, '..', '..', '..');

async function script(name: string, timeoutMs: number): Promise<void> {
  try {
    await run(join(repo, 'scripts', name), [], { timeout: timeoutMs });
  } catch (e) {
    const err = e as { stderr?: string; message: string };
    throw new Error(`scripts/${name} failed; the docker runtime tests need it:\n${err.stderr ?? err.message}`);
  }
}

async function imageVersion(): Promise<string> {
  const info = await docker.getImage(IMAGE).inspect();
  return info.Config.Labels?.['org.opencontainers.image.version'] ?? '';
}

beforeAll(async () => {
  if (!(await docker.ping().then(() => true, () => false))) await script('start-dockerd.sh', 120_000);
  if (!(await imageVersion().then(Boolean, () => false))) await script('build-mysql-image.sh', 480_000);
  expect(await imageVersion()).toMatch(/^10\.11\.\d+$/);
}, 600_000);

runtimeContract('docker', async () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-drt-'));
  const version = await imageVersion();
  const make = () => createDockerRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  return {
    runtime: make(),
    engine: { id: `mysql/${version}`, version, image: IMAGE },
    root: join(root, 'data'),
    reopen: async () => make(),
    cleanup: async () => rmSync(root, { recursive: true, force: true }),
  };
});

describe('docker adapter specifics', () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-drs-'));
  const runtimeRoot = join(root, 'runtime');
  const runtime = createDockerRuntime({ root: runtimeRoot, logger: silentLogger() });
  const agentId = `docker-specifics-${process.pid}`;
  const name = `fulcrum-ds${Date.now() % 100000}-n1`;
  const broken = `fulcrum-ds${Date.now() % 100000}-n2`;
  let spec: NodeSpec;

  beforeAll(async () => {
    const version = await imageVersion();
    spec = {
      name,
      labels: { [LABEL_MANAGED]: 'true', [LABEL_AGENT]: agentId, [LABEL_DATABASE]: '991', [LABEL_NODE]: '1' },
      engine: { id: `mysql/${version}`, version, image: IMAGE },
      dataDir: join(root, 'data', name),
      config: '[mysqld]\nserver_id=11\ninnodb_buffer_pool_size=32M\n',
      files: {},
      host: '127.0.0.1',
      port: await freePort(),
      memoryMb: 256,
      cpus: 0.5,
    };
  });

  afterAll(async () => {
    await runtime.remove(name, { withData: true }).catch(() => undefined);
    await runtime.remove(broken, { withData: true }).catch(() => undefined);
    rmSync(root, { recursive: true, force: true });
  });

  it('runs one labelled container with host networking, restart policy no and bind mounts', async () => {
    await runtime.ensure(spec);
    const info = await docker.getContainer(name).inspect();
    expect(info.Name).toBe(`/${name}`);
    expect(info.HostConfig.NetworkMode).toBe('host');
    expect(info.HostConfig.RestartPolicy?.Name).toBe('no');
    expect(info.Config.Labels).toMatchObject(spec.labels);
    expect(info.HostConfig.Binds).toContain(`${spec.dataDir}:/var/lib/mysql`);
  });

  it('enforces the memory and cpu limits in the kernel (cgroup of the container)', async () => {
    const info = await docker.getContainer(name).inspect();
    expect(info.HostConfig.Memory).toBe(256 * 1024 * 1024);
    expect(info.HostConfig.NanoCpus).toBe(500_000_000);
    const readCgroup = async (v1: string, v2: string) =>
      (await dockerExec(docker.getContainer(name), ['sh', '-c', `cat ${v1} 2>/dev/null || cat ${v2}`])).stdout.trim();
    const mem = await readCgroup('/sys/fs/cgroup/memory/memory.limit_in_bytes', '/sys/fs/cgroup/memory.max');
    expect(Number(mem)).toBe(256 * 1024 * 1024);
    const cpu = await readCgroup('/sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us', '/sys/fs/cgroup/cpu.max');
    const [quota, period] = cpu.split(/\s+/).map(Number);
    expect(quota! / period!).toBe(0.5);
  });

  it('exec pipes stdin into the client and streams a dump to a writable', async () => {
    const sql = Readable.from(['CREATE DATABASE s; CREATE TABLE s.t (v INT);\n', 'INSERT INTO s.t VALUES (1),(2),(3);\n']);
    const load = await runtime.exec(name, ['mariadb', '--user=root'], { stdin: sql });
    expect(load.stderr).toBe('');
    expect(load.exitCode).toBe(0);
    const sink = new PassThrough();
    const chunks: Buffer[] = [];
    sink.on('data', (c: Buffer) => chunks.push(c));
    const dump = await runtime.exec(name, ['mariadb-dump', '--user=root', '--skip-extended-insert', 's'], { stdout: sink });
    expect(dump.exitCode).toBe(0);
    expect(dump.stdout).toBe('');
    expect(Buffer.concat(chunks).toString()).toMatch(/INSERT INTO `t` VALUES \(3\)/);
    const bad = await runtime.exec(name, ['mariadb', '--user=root', '-e', 'SELECT * FROM s.nope']);
    expect(bad.exitCode).not.toBe(0);
    expect(bad.stderr).toMatch(/doesn't exist/);
  });

  it('a server that cannot start is reported with its log lines and left stopped', async () => {
    const bad = { ...spec, name: broken, dataDir: join(root, 'data', broken), port: await freePort(), config: '[mysqld]\nno_such_option=1\n' };
    const err = await runtime.ensure(bad, { timeoutMs: 30_000 }).then(() => null, (e: unknown) => e);
    expect(err).toBeInstanceOf(FulcrumError);
    expect(String((err as Error).message)).toContain(broken);
    expect(String((err as Error).message)).toMatch(/no_such_option/);
    expect((await runtime.inspect(broken)).state).toBe('stopped');
  });

  it('an engine without an image is rejected before anything is created', async () => {
    const noImage = { ...spec, name: 'fulcrum-noimage-n1', engine: { id: 'mysql/0.0', version: '0.0' } };
    await expect(async () => runtime.ensure(noImage)).rejects.toThrow(/no image/);
    expect((await runtime.inspect('fulcrum-noimage-n1')).state).toBe('missing');
  });

  it('the lab catalogue lists the local image under its true server version', async () => {
    const version = await imageVersion();
    const catalogue = await detectDockerCatalogue(docker);
    expect(catalogue).toContainEqual({ id: `mysql/${version}`, engine: 'mysql', version, image: IMAGE });
  });

  it('accepts the agent state dir instead of a root (as agent/main.ts calls it)', async () => {
    const other = createDockerRuntime({ stateDir: join(root, 'state'), logger: silentLogger() });
    expect(await other.list({})).toEqual([]);
    expect(() => createDockerRuntime({ logger: silentLogger() })).toThrow(/root directory/);
  });

  it('remove leaves no container of this runtime behind', async () => {
    await runtime.remove(name, { withData: true });
    await runtime.remove(broken, { withData: true });
    const left = await docker.listContainers({ all: true, filters: JSON.stringify({ label: [`fulcrum.runtime-root=${runtimeRoot}`] }) });
    expect(left).toEqual([]);
    expect(await runtime.list({})).toEqual([]);
  });
});
