import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { startTcpBackend, waitFor } from '../../helpers/backends.js';
import { startTestControlPlane } from './grpc-control-plane.js';
import { greeting } from './clients.js';
import { config, node, nodebalancer } from './snapshot.js';
import { cleanup, workerPids } from './workers-fixture.js';
import { alive } from '../../helpers/lab.js';

/**
 * A data plane of two workers fed by a real gRPC control plane (docs/dataplane.md, "Workers"):
 * a worker that does not apply a snapshot within --worker-apply-timeout does not hold the ACK;
 * it is killed and replaced, and the replacement serves the new snapshot. Addresses: 127.64.17.0/24.
 */
describe('a worker that hangs while applying', () => {
  it('is killed and replaced after the apply timeout; the snapshot is ACKed and every worker serves it', async () => {
    const one = await startTcpBackend('one', { ip: '127.64.17.1' });
    const two = await startTcpBackend('two', { ip: '127.64.17.2' });
    cleanup.push(() => one.close(), () => two.close());
    const cp = await startTestControlPlane('127.64.17.100');
    cleanup.push(() => cp.close());
    const nbIp = '127.64.17.10';
    const port = 7671;
    const cfg = config(port, [node(one.address)]);
    const nb = nodebalancer(nbIp, [cfg]);
    const first = cp.push({ version: 1, nodebalancers: [nb] as never });

    const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-dp-scale-'));
    cleanup.push(() => rmSync(stateDir, { recursive: true, force: true }));
    let out = '';
    const child: ChildProcess = spawn(process.execPath, [
      join(process.cwd(), 'bin', 'fulcrum.js'), 'dataplane', '--id', 'dp-scale-hang', '--state', stateDir,
      '--control-plane', cp.address, '--insecure-grpc', '--workers', '2', '--worker-apply-timeout', '3',
    ], { env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: 'warn' }, stdio: ['ignore', 'pipe', 'pipe'] });
    child.stdout!.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr!.on('data', (d: Buffer) => (out += d.toString()));
    const exited = new Promise((r) => child.once('exit', r));
    cleanup.push(async () => {
      child.kill('SIGTERM');
      const kill = setTimeout(() => child.kill('SIGKILL'), 10_000);
      await exited;
      clearTimeout(kill);
    });
    await waitFor(() => existsSync(join(stateDir, 'dataplane.json')), 60_000, 'data plane started');
    await waitFor(() => cp.acks.some((a) => a.responseNonce === first && !a.errorDetail), 60_000, 'version 1 ACKed');
    await waitFor(() => workerPids(child.pid!).length === 2, 30_000, 'two workers');
    await waitFor(() => greeting(nbIp, port).then((g) => g === 'one', () => false), 30_000, 'version 1 served');

    // One worker stops dead (as a hung one would); the next snapshot moves the node.
    const [hung, other] = workerPids(child.pid!);
    process.kill(hung!, 'SIGSTOP');
    const startedAt = Date.now();
    const second = cp.push({ version: 2, nodebalancers: [{ ...nb, configs: [{ ...cfg, nodes: [node(two.address)] }] }] as never });
    await waitFor(() => cp.acks.find((a) => a.responseNonce === second), 60_000, `version 2 answered (${out})`);
    const ack = cp.acks.find((a) => a.responseNonce === second)!;
    expect(ack.errorDetail ?? '').toBe('');
    expect(Number(ack.versionApplied)).toBe(2);
    // Not answered before the timeout (the hung worker was waited for), and the hung one is gone.
    expect(Date.now() - startedAt).toBeGreaterThanOrEqual(2500);
    await waitFor(() => !alive(hung!), 10_000, 'the hung worker killed');
    expect(out).toMatch(/did not apply the snapshot in time/);
    // A replacement takes its slot, the other worker untouched; every connection reaches version 2.
    await waitFor(() => {
      const now = workerPids(child.pid!);
      return now.length === 2 && now.includes(other!) && !now.includes(hung!);
    }, 30_000, 'a replacement worker');
    await waitFor(() => greeting(nbIp, port).then((g) => g === 'two', () => false), 30_000, 'version 2 served');
    for (let i = 0; i < 10; i++) expect(await greeting(nbIp, port)).toBe('two');
  });
});
