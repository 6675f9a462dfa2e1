// e2e-lane: concurrent (a free port, a random container name, the prebuilt images).
import { afterAll, describe, expect, it } from 'vitest';
import { execFile, execFileSync, spawnSync } from 'node:child_process';
import { promisify } from 'node:util';
import { readFileSync, readlinkSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { DATAPLANE_NODE_FLAGS } from '../../lib/node-flags.js';
import { api, repoRoot, until } from '../helpers/lab.js';
import { freePort } from '../helpers/tcp.js';

function sh(cmd: string, args: string[]): string {
  return execFileSync(cmd, args, { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 * 1024 * 1024 });
}

/**
 * The long steps (image builds), without blocking the worker: vitest's worker answers its runner
 * over RPC with a fixed 60 s timeout, and a synchronous minute-long build on a busy machine made
 * the run fail with "Timeout calling onTaskUpdate" although the test passed.
 */
async function shAsync(cmd: string, args: string[]): Promise<string> {
  return (await promisify(execFile)(cmd, args, { cwd: repoRoot, encoding: 'utf8', maxBuffer: 64 * 1024 * 1024 })).stdout;
}


// The container image of docs/install.md: built without a registry on top of the MariaDB image,
// the control plane runs in it as a non-root user and answers the API.
describe('the fulcrum container image', () => {
  const name = `ops-fulcrum-image-${randomBytes(4).toString('hex')}`;
  const dpName = `${name}-dp`;
  afterAll(() => {
    spawnSync('docker', ['rm', '-f', '-v', name, dpName], { stdio: 'ignore' });
  });
  /** A container's main process, seen from the host: its executable and its arguments after argv[0]. */
  const mainProcess = (container: string) => {
    const proc = `/proc/${sh('docker', ['inspect', '-f', '{{.State.Pid}}', container]).trim()}`;
    return { exe: readlinkSync(`${proc}/exe`), args: readFileSync(`${proc}/cmdline`, 'utf8').split('\0').filter(Boolean).slice(1) };
  };

  // Building the sources (npm run build) dominates on a cold run: a few minutes on 2 busy cores.
  it('builds, runs the control plane as a non-root user and serves /v4/regions, and the data plane with its V8 flags', { timeout: 900_000 }, async () => {
    await shAsync('bash', ['scripts/start-dockerd.sh']);
    await shAsync('bash', ['scripts/build-mysql-image.sh']);
    const started = Date.now();
    await shAsync('bash', ['scripts/build-fulcrum-image.sh']);
    const version = (JSON.parse(readFileSync(`${repoRoot}/package.json`, 'utf8')) as { version: string }).version;
    process.stdout.write(`fulcrum/fulcrum:${version} built in ${((Date.now() - started) / 1000).toFixed(0)} s\n`);
    expect(sh('docker', ['image', 'inspect', '-f', '{{.Config.User}} {{json .Config.Entrypoint}}', `fulcrum/fulcrum:${version}`]).trim())
      .toBe('fulcrum ["/opt/fulcrum/bin/entrypoint.sh"]');
    // The runtime the tests ran on (Node 24, docs/testing.md), not the system's older node.
    expect(sh('docker', ['run', '--rm', '--network', 'none', '--entrypoint', '/usr/local/bin/node', `fulcrum/fulcrum:${version}`, '-p', 'process.versions.node']).trim())
      .toMatch(/^24\./);

    // Host networking: this machine's dockerd may run without a bridge (docs/docker.md).
    const port = await freePort();
    sh('docker', ['run', '-d', '--name', name, '--network', 'host', `fulcrum/fulcrum:${version}`,
      'control-plane', '--state', '/var/lib/fulcrum/control-plane', '--api-host', '127.0.0.1', '--api-port', String(port),
      '--grpc-port', '0', '--bootstrap-port', '0']);
    const token = await until('admin token', () => {
      const r = spawnSync('docker', ['exec', name, 'cat', '/var/lib/fulcrum/control-plane/admin-token'], { encoding: 'utf8' });
      if (r.status !== 0 && sh('docker', ['inspect', '-f', '{{.State.Running}}', name]).trim() !== 'true') {
        throw new Error(`container stopped: ${sh('docker', ['logs', name])}`);
      }
      return r.status === 0 && r.stdout.trim() ? r.stdout.trim() : undefined;
    }, 120_000, 250);
    const regions = await until('/v4/regions', () => api(`http://127.0.0.1:${port}`, token)('GET', '/v4/regions').catch(() => undefined), 60_000, 250);
    expect(regions.status).toBe(200);
    expect(regions.body.data.length).toBeGreaterThan(0);
    expect((await api(`http://127.0.0.1:${port}`, 'wrong')('GET', '/v4/regions')).status).toBe(401);

    // The process itself, seen from the host: real, effective, saved and filesystem uids are not root.
    const pid = sh('docker', ['inspect', '-f', '{{.State.Pid}}', name]).trim();
    const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)$/m.exec(readFileSync(`/proc/${pid}/status`, 'utf8'))!.slice(1).map(Number);
    expect(uids).toHaveLength(4);
    for (const uid of uids) expect(uid).not.toBe(0);
    // The entrypoint execs node (no shell left in between), without the data plane's V8 flags.
    const cp = mainProcess(name);
    expect(cp.exe).toBe('/usr/local/bin/node');
    expect(cp.args.slice(0, 2)).toEqual(['/opt/fulcrum/bin/fulcrum.js', 'control-plane']);
    expect(sh('docker', ['exec', name, 'id', '-un']).trim()).toBe('fulcrum');
    // Its state is private to that user.
    expect(sh('docker', ['exec', name, 'stat', '-c', '%U %a', '/var/lib/fulcrum/control-plane/admin-token']).trim()).toBe('fulcrum 600');

    // The data plane runs with lib/node-flags.ts's V8 flags on node's command line, as its systemd
    // unit does (its workers take them from there). No network: it starts and keeps redialling.
    sh('docker', ['run', '-d', '--name', dpName, '--network', 'none', `fulcrum/fulcrum:${version}`,
      'dataplane', '--state', '/var/lib/fulcrum/dataplane', '--control-plane', '127.0.0.1:9', '--insecure-grpc',
      '--id', 'image-dp', '--region', 'us-east', '--workers', '1']);
    await until('the data plane started', () => {
      const r = spawnSync('docker', ['exec', dpName, 'cat', '/var/lib/fulcrum/dataplane/dataplane.json'], { encoding: 'utf8' });
      if (r.status !== 0 && sh('docker', ['inspect', '-f', '{{.State.Running}}', dpName]).trim() !== 'true') {
        throw new Error(`data plane container stopped: ${sh('docker', ['logs', dpName])}`);
      }
      return r.status === 0 && r.stdout.includes('"pid"') ? true : undefined;
    }, 120_000, 250);
    const dp = mainProcess(dpName);
    expect(dp.exe).toBe('/usr/local/bin/node');
    expect(dp.args.slice(0, DATAPLANE_NODE_FLAGS.length + 2)).toEqual([...DATAPLANE_NODE_FLAGS, '/opt/fulcrum/bin/fulcrum.js', 'dataplane']);
  });
});
