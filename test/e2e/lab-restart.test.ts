import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, startLab, until, type RunningLab } from '../helpers/lab.js';
import { ask, echoBackend } from '../helpers/tcp.js';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

// Issue 2: Ctrl-C stops everything cleanly; a second start reuses the state.
describe('fulcrum lab: stop and start again', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'fulcrum-lab-restart-'));
  let lab: RunningLab | undefined;
  const backend = echoBackend('127.0.6.1', 'solo');

  afterAll(async () => {
    await lab?.stop();
    await (await backend).close();
  });

  it('stops every child on Ctrl-C and comes back with the same state and token', async () => {
    const b = await backend;
    lab = await startLab({ stateDir });
    const first = lab.info;
    const call = api(first.apiUrl, first.adminToken);
    const created = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'survivor',
      configs: [{ port: 7100, protocol: 'tcp', nodes: [{ label: 'solo', address: `127.0.6.1:${b.port}` }] }],
    });
    expect(created.status).toBe(200);
    await until('traffic', () => ask(created.body.ipv4, 7100, 'a').then((s) => s === 'solo:a'));

    await lab.stop();
    expect(lab.proc.exitCode).toBe(0);
    for (const pid of [first.pids.controlPlane, first.pids.dataplane, first.pids.agent]) {
      await until(`pid ${pid} gone`, () => !alive(pid), 10_000);
    }
    await expect(ask(created.body.ipv4, 7100, 'b', { timeoutMs: 500 })).rejects.toThrow();

    lab = await startLab({ stateDir });
    expect(lab.info.adminToken).toBe(first.adminToken);
    const again = await api(lab.info.apiUrl, lab.info.adminToken)('GET', `/v4/nodebalancers/${created.body.id}`);
    expect(again.body).toMatchObject({ id: created.body.id, ipv4: created.body.ipv4, label: 'survivor' });
    await until('traffic after restart', () => ask(created.body.ipv4, 7100, 'c').then((s) => s === 'solo:c'));
  });
});
