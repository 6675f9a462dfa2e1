import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ensureGoClient, LINODEGO_VERSION } from '../helpers/go-clients.js';
import { api, repoRoot, startLab, type RunningLab } from '../helpers/lab.js';
import { run } from '../helpers/linode-cli.js';
import { startUdpEcho, type UdpEcho } from '../helpers/udp.js';

/**
 * linodego, the Go client the Terraform provider is built on, against a fresh lab: our program in
 * test/clients/linodego (main.go says what it does) runs with the lab's `export LINODE_URL=...`
 * line and fails on the first answer linodego decodes differently from what it asked for. This
 * file then checks from the API's side that what it made is gone and that its events were kept.
 */
describe(`linodego ${LINODEGO_VERSION} against a lab`, () => {
  let lab: RunningLab;
  let work: string;
  let bin: string;
  const servers: Server[] = [];
  let udp: UdpEcho;
  const hits = new Map<string, number>();
  // Backends on addresses no other e2e file uses.
  const web = ['127.0.131.1', '127.0.131.2'];

  beforeAll(async () => {
    // The build (minutes on a fresh machine, cached after) and the lab start side by side.
    const [client, started] = await Promise.all([ensureGoClient('linodego'), startLab()]);
    lab = started;
    bin = client.bin;
    console.log(`linodego client ready in ${client.seconds.toFixed(1)} s (${client.cached ? 'cached' : 'built'})`);
    work = mkdtempSync(join(tmpdir(), 'linodego-'));
    for (const ip of web) {
      const s = createServer((_q, res) => {
        hits.set(ip, (hits.get(ip) ?? 0) + 1);
        res.end(`hello from ${ip}\n`);
      });
      await new Promise<void>((resolve, reject) => s.once('error', reject).listen(8080, ip, resolve));
      servers.push(s);
    }
    udp = await startUdpEcho('udp-1', '127.0.131.3');
  }, 1_500_000);

  afterAll(async () => {
    for (const s of servers) s.close();
    await udp?.close();
    await lab?.stop();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('creates, lists with filters, updates, waits on events and deletes NodeBalancers and databases', async () => {
    expect(readFileSync(join(repoRoot, 'test', 'clients', 'linodego', 'go.mod'), 'utf8')).toContain(`github.com/linode/linodego ${LINODEGO_VERSION}\n`);
    // The line the lab prints for Terraform and linodego, as a user pastes it; only those
    // LINODE_* variables reach the program, and HOME is empty (no linode config file is read).
    const line = /export (LINODE_URL=\S+ LINODE_API_VERSION=\S+ LINODE_TOKEN=\S+)/.exec(lab.output());
    if (!line) throw new Error(`the lab printed no LINODE_URL export line:\n${lab.output()}`);
    const env = {
      ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('LINODE_'))),
      ...Object.fromEntries(line[1]!.split(' ').map((kv) => kv.split('=') as [string, string])),
      HOME: work,
    };
    const r = await run(bin, ['-http-backends', web.map((ip) => `${ip}:8080`).join(','), '-udp-backend', udp.address, '-label-prefix', 'lgo'], { cwd: work, env });
    const steps = r.stdout.split('\n').filter(Boolean).map((l) => JSON.parse(l) as Record<string, unknown> & { step: string });
    expect(r.code, `${r.stdout}\n${r.stderr}`).toBe(0);
    expect(steps.filter((s) => s.step !== 'event').map((s) => s.step)).toEqual([
      'nodebalancer created', 'http config and nodes created', 'http traffic', 'udp config and traffic', 'nodebalancer updated',
      'lists with filters', 'udp config deleted', 'database active', 'database updated', 'fork active', 'databases deleted', 'nodebalancer deleted',
    ]);
    // The events its waiters found, in the order it waited for them.
    expect(steps.filter((s) => s.step === 'event').map((s) => [s.action, s.status])).toEqual([
      ['nodebalancer_create', 'notification'], ['nodebalancer_node_update', 'notification'],
      ['database_create', 'finished'], ['database_create', 'finished'], ['nodebalancer_delete', 'notification'],
    ]);
    // Traffic really went through the data plane to our backends.
    expect(web.map((ip) => hits.get(ip) ?? 0).every((n) => n >= 1)).toBe(true);
    expect(udp.received).toBeGreaterThanOrEqual(1);

    // From the API's side: nothing left, every action recorded.
    const call = api(`${lab.info.apiUrl}/v4`, lab.info.adminToken);
    const nb = steps.find((s) => s.step === 'nodebalancer created')!.id as number;
    const [db, fork] = (steps.find((s) => s.step === 'databases deleted')!.ids as number[]);
    expect((await call('GET', `/nodebalancers/${nb}`)).status).toBe(404);
    expect((await call('GET', `/databases/mysql/instances/${db}`)).status).toBe(404);
    expect((await call('GET', `/databases/mysql/instances/${fork}`)).status).toBe(404);
    expect((await call('GET', '/nodebalancers')).body.data).toEqual([]);
    expect((await call('GET', '/databases/instances')).body.data).toEqual([]);
    const forkStep = steps.find((s) => s.step === 'fork active')!;
    expect(forkStep.source).toBe(db);
    const events = (await call('GET', '/account/events?page_size=500')).body.data as { action: string; entity: { id: number } | null; status: string }[];
    const seen = (action: string, id: number) => events.filter((e) => e.action === action && e.entity?.id === id).map((e) => e.status);
    expect(seen('nodebalancer_create', nb)).toEqual(['notification']);
    expect(seen('nodebalancer_delete', nb)).toEqual(['notification']);
    expect(seen('database_update', db)).toContain('finished');
    for (const id of [db, fork]) {
      expect(seen('database_create', id)).toEqual(['finished']);
      expect(seen('database_delete', id)).toEqual(['finished']);
    }
  }, 1_500_000);
});
