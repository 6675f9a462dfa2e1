import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { execFileSync, type ChildProcess } from 'node:child_process';
import { api, runFulcrum, startLab, until, type RunningLab } from '../helpers/lab.js';
import { ask, echoBackend } from '../helpers/tcp.js';

// Issue 2, acceptance 2-4: one NodeBalancer carrying real traffic through all three processes,
// the data plane's static stability across a control-plane crash, and NACK of a bad snapshot.
describe('fulcrum lab: one NodeBalancer end to end', () => {
  let lab: RunningLab;
  let call: ReturnType<typeof api>;
  const backends: { close(): Promise<void> }[] = [];
  let restartedCp: ChildProcess | undefined;
  let squatter: Server | undefined;

  beforeAll(async () => {
    lab = await startLab();
    call = api(lab.info.apiUrl, lab.info.adminToken);
  });

  afterAll(async () => {
    squatter?.close();
    restartedCp?.kill('SIGTERM');
    await lab?.stop();
    await Promise.all(backends.map((b) => b.close()));
  });

  it('serves prom-client /metrics on every process', async () => {
    for (const [name, url] of Object.entries(lab.info.metrics)) {
      const res = await fetch(url);
      expect(res.status, name).toBe(200);
      const text = await res.text();
      expect(text, name).toMatch(/^fulcrum_process_cpu_seconds_total/m);
    }
  });

  let nb: { id: number; ipv4: string; ipv6: string | null; label: string };
  const port = 7001;

  it('balances a tcp config over two real backends in turn', async () => {
    const a = await echoBackend('127.0.5.1', 'alpha');
    const b = await echoBackend('127.0.5.2', 'beta');
    backends.push(a, b);
    const res = await call('POST', '/v4/nodebalancers', {
      region: 'us-east',
      label: 'foundation-nb',
      configs: [{
        port, protocol: 'tcp', algorithm: 'roundrobin',
        nodes: [
          { label: 'alpha', address: `127.0.5.1:${a.port}` },
          { label: 'beta', address: `127.0.5.2:${b.port}` },
        ],
      }],
    });
    expect(res.status).toBe(200);
    nb = res.body;
    expect(nb.ipv4).toMatch(/^127\.77\./);

    await until('listener on the NodeBalancer address', () => ask(nb.ipv4, port, 'ping').then(() => true));
    const answers: string[] = [];
    for (let i = 0; i < 6; i++) answers.push((await ask(nb.ipv4, port, 'hello')).split(':')[0]!);
    expect(new Set(answers)).toEqual(new Set(['alpha', 'beta']));
    // Round robin over two equal nodes alternates.
    for (let i = 1; i < answers.length; i++) expect(answers[i]).not.toBe(answers[i - 1]);
  });

  it('gives the NodeBalancer an IPv6 address of the lab\'s own range and serves the config there too', async () => {
    // The lab makes its /64 local on lo at start (it runs as root here).
    const pool = lab.info.nodebalancerIpv6Pool!;
    expect(pool).toMatch(/^fd[0-9a-f]{2}:[0-9a-f]{1,4}:[0-9a-f]{1,4}:[0-9a-f]{1,4}::\/64$/);
    expect(nb.ipv6).toBe(`${pool.slice(0, -'/64'.length)}2`);
    const answers: string[] = [];
    for (let i = 0; i < 4; i++) answers.push((await ask(nb.ipv6!, port, 'over ipv6')).split(':')[0]!);
    expect(new Set(answers)).toEqual(new Set(['alpha', 'beta']));
  });

  it('keeps serving while the control plane is down, and loses nothing across its restart', async () => {
    const before = await call('GET', '/v4/fulcrum/dataplanes');
    const versionBefore = before.body.data[0].versionApplied as number;
    expect(versionBefore).toBeGreaterThan(0);

    process.kill(lab.info.pids.controlPlane, 'SIGKILL');
    await until('control plane gone', () => fetch(lab.info.apiUrl).then(() => false, () => true));
    expect((await ask(nb.ipv4, port, 'still there?')).endsWith(':still there?')).toBe(true);

    const [apiHostPort, grpcPort] = [lab.info.apiUrl.replace('http://', ''), lab.info.grpcAddress.split(':')[1]!];
    restartedCp = runFulcrum(['control-plane', '--state', join(lab.info.stateDir, 'control-plane'),
      '--api-port', apiHostPort.split(':')[1]!, '--grpc-port', grpcPort]);
    await until('control plane back', () => call('GET', '/v4/nodebalancers').then((r) => r.status === 200), 30_000);

    const again = await call('GET', `/v4/nodebalancers/${nb.id}`);
    expect(again.body).toMatchObject({ id: nb.id, ipv4: nb.ipv4, label: nb.label });
    const status = await until('data plane reconnected and ACKed', async () => {
      const r = await call('GET', '/v4/fulcrum/dataplanes');
      const dp = r.body.data.find((d: any) => d.id === 'lab-dataplane');
      return dp?.connected && dp.versionApplied >= versionBefore && dp.lastError === null ? dp : undefined;
    }, 30_000);
    expect(status.versionApplied).toBe(versionBefore); // same content keeps its version
  });

  it('NACKs a snapshot it cannot apply, keeps the old config serving, and records the error', async () => {
    const nb2 = await call('POST', '/v4/nodebalancers', { region: 'us-east', label: 'nack-nb' });
    expect(nb2.status).toBe(200);
    // Something else already listens on the port the new config wants.
    squatter = createServer();
    await new Promise<void>((r) => squatter!.listen(7002, nb2.body.ipv4, () => r()));
    const cfg = await call('POST', `/v4/nodebalancers/${nb2.body.id}/configs`, { port: 7002, protocol: 'tcp' });
    expect(cfg.status).toBe(200);

    const dp = await until('NACK recorded', async () => {
      const r = await call('GET', '/v4/fulcrum/dataplanes');
      const d = r.body.data.find((x: any) => x.id === 'lab-dataplane');
      return d?.lastError ? d : undefined;
    });
    expect(dp.lastError).toMatch(/7002/);
    expect((await ask(nb.ipv4, port, 'old config')).endsWith(':old config')).toBe(true);

    // Removing the offending config makes the next snapshot good again.
    await call('DELETE', `/v4/nodebalancers/${nb2.body.id}`);
    await until('error cleared after a good snapshot', async () => {
      const r = await call('GET', '/v4/fulcrum/dataplanes');
      return r.body.data.find((x: any) => x.id === 'lab-dataplane')?.lastError === null;
    });
  });

  it('closes the listener when the NodeBalancer is deleted', async () => {
    expect((await call('DELETE', `/v4/nodebalancers/${nb.id}`)).status).toBe(200);
    await until('listener closed', () => ask(nb.ipv4, port, 'x', { timeoutMs: 500 }).then(() => false, (e: NodeJS.ErrnoException) => e.code === 'ECONNREFUSED'));
    expect((await call('GET', `/v4/nodebalancers/${nb.id}`)).status).toBe(404);
  });

  it('removes its IPv6 route from lo when it stops', async () => {
    const pool = lab.info.nodebalancerIpv6Pool!;
    const routes = () => execFileSync('ip', ['-6', 'route', 'show', 'table', 'local'], { encoding: 'utf8' });
    expect(routes()).toContain(`local ${pool} dev lo`);
    await lab.stop();
    expect(routes()).not.toContain(pool);
  });
});
