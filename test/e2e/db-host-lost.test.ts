// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { execFile } from 'node:child_process';
import { existsSync, mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot, until } from '../helpers/lab.js';
import { createHosts, leftovers, type Host, type HostNet } from '../helpers/hosts.js';
import { MYSQL, attempts, engineOf, holderOf, listensOn, mysqlClient, sixOf, startFleet, waitActive, type Fleet } from '../helpers/fleet-hosts.js';

// A database host lost for good (docs/multi-host.md, "A lost host"): a 3-node semi_synch cluster
// on three of four agent hosts, written from a client host through hosts.primary (a data plane
// pair). The primary's host is cut off and declared lost with `fulcrum host lost`: another member
// is named primary, the lost member is re-placed on the fourth host and seeded from the new
// primary over TLS, and the database is active with three members on three hosts other than
// the lost one, with no acknowledged row lost. Then the lost host's link returns and it joins
// again with a new join token: its old member is removed, not rejoined. Nothing is left.

const PREFIX = 'mhl';
const SUBNET = 193;
const NB_POOL = '198.18.192.0/24';
const DB_POOL = '198.18.193.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.194.0/29', ag2: '198.18.194.8/29', ag3: '198.18.194.16/29', ag4: '198.18.194.24/29' };

describe('a database host lost for good', () => {
  let net: HostNet;
  let dir: string;
  let fleet: Fleet;
  let dpa: Host, dpb: Host, cl: Host;
  let agents: Host[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-mhl-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag1', 'ag2', 'ag3', 'ag4', 'cl'] });
    const [cpHost, a, b, ag1, ag2, ag3, ag4, c] = net.hosts as [Host, Host, Host, Host, Host, Host, Host, Host];
    [dpa, dpb, cl, agents] = [a, b, c, [ag1, ag2, ag3, ag4]];
    fleet = await startFleet({ cpHost, dir, nbPool: NB_POOL, dbPool: DB_POOL });
    await fleet.dataplane(dpa, [dpb], 150);
    await fleet.dataplane(dpb, [dpa], 100);
    for (const h of agents) await fleet.agent(h, NODE_POOLS[h.name]!, sixOf(NODE_POOLS[h.name]!));
  }, 300_000);

  afterAll(async () => {
    await fleet?.stopAll();
    await net?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('re-places the lost primary\'s member on the fourth host, active with three members on three other hosts, no acknowledged row lost; the returning host\'s member is removed', async () => {
    const { call, procs } = fleet;
    onTestFailed(() => console.log(`[control plane output]\n${fleet.cp.output().slice(-6000)}\n[agents]\n${agents.map((h) => `-- ${h.name}\n${procs[h.name]?.output().slice(-3000)}`).join('\n')}`));
    await until('four agents that run members across hosts', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { connected: boolean; membersAcrossHosts: boolean }[]).filter((a) => a.connected && a.membersAcrossHosts).length === 4;
    }, 120_000, 500);
    const created = await call('POST', MYSQL, {
      label: 'mhl-lost', region: 'us-east', type: 'g6-nanode-1', engine: await engineOf(fleet, agents[0]!), cluster_size: 3, replication_type: 'semi_synch', allow_list: [`${cl.ip}/32`],
    });
    expect(created.status).toBe(200);
    const id: number = created.body.id;
    await waitActive(fleet, id, 600_000, () => agents.map((h) => procs[h.name]!.output().slice(-2000)).join('\n'));
    const hostOf = (ip: string) => agents.find((h) => sixOf(NODE_POOLS[h.name]!).includes(ip));
    const db = await until('three members on three hosts', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body.members ?? {});
      return m.length === 3 && new Set(m.map((x) => hostOf(x)?.name)).size === 3 ? r.body : undefined;
    }, 60_000, 500);
    const oldPrimary = Object.keys(db.members).find((m) => db.members[m] === 'primary')!;
    const lost = hostOf(oldPrimary)!;
    const spare = agents.find((h) => !Object.keys(db.members).some((m) => hostOf(m) === h))!;
    const primary: string = db.hosts.primary;
    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    await holderOf(dpa, dpb, primary);
    const client = await mysqlClient(call, cl, id, primary);
    await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
    const loop = client.loop();
    await until('writes through hosts.primary', () => attempts(loop).filter((a) => a.ok).length >= 5, 60_000, 100);

    // The primary's host is cut off for good and declared lost by the operator, on the control
    // plane's host (the same as POST /v4/fulcrum/agents/ID/lost).
    const cutAt = Date.now();
    await lost.linkDown();
    const declared = await fulcrumCli(['host', 'lost', lost.name, '--state', join(dir, 'cp')]);
    expect(declared).toContain(`agent ${lost.name} is lost`);
    const first = await until('a write begun after the cut succeeds', () => attempts(loop).find((a) => a.start > cutAt && a.ok), 60_000, 100);
    const gap = first.end - cutAt;
    const failed = attempts(loop).filter((a) => a.start > cutAt - 4000 && a.start < first.start && !a.ok);
    console.log(`[db-host-lost] primary's host ${lost.name} cut and declared lost: writes through hosts.primary succeeded again after ${gap} ms (${failed.length} failed attempts: ${[...new Set(failed.map((a) => a.err))].join(', ')})`);
    expect(gap).toBeLessThan(30_000);
    const hosts = await call('GET', '/v4/fulcrum/agents');
    expect((hosts.body.data as { id: string; state: string }[]).find((a) => a.id === lost.name)?.state).toBe('lost');

    // Healed: active, three members on three hosts, none on the lost one, one on the spare.
    const healed = await until('active with three members on three other hosts', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      const m = Object.keys(r.body.members ?? {});
      const on = new Set(m.map((x) => hostOf(x)?.name));
      return r.body.status === 'active' && m.length === 3 && on.size === 3 && !on.has(lost.name) && on.has(spare.name) ? r.body : undefined;
    }, 600_000, 1000);
    console.log(`[db-host-lost] active with three members on ${Object.keys(healed.members).map((m) => hostOf(m)!.name).join(', ')} ${Date.now() - cutAt} ms after the cut`);
    expect(Object.values(healed.members).filter((r) => r === 'primary')).toHaveLength(1);
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    await loop.kill();

    // No acknowledged row is lost, through hosts.primary and on the new member itself.
    const acked = attempts(loop).filter((a) => a.ok).map((a) => a.id);
    expect(acked.length).toBeGreaterThan(5);
    const rows = await until('the rows read back', () => client.sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    const stored = new Set((rows as { id: number }[]).map((r) => r.id));
    expect(acked.filter((i) => !stored.has(i))).toEqual([]);
    const events = await call('GET', '/v4/account/events?page_size=100');
    const mine = (events.body.data as { action: string; message: string | null; entity: { id: number } | null }[]).filter((e) => e.entity?.id === id);
    const newMember = Object.keys(healed.members).find((m) => hostOf(m) === spare)!;
    const direct = await mysqlClient(call, cl, id, newMember);
    await until(`every row on the new member ${newMember}`, async () => (await direct.sql('SELECT COUNT(*) AS n FROM fh.t'))?.[0]?.n === stored.size, 120_000, 1000);
    const seeded = await until('the caught-up event', async () => ((await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[])
      .find((e) => e.entity?.id === id && e.action === 'database_update' && /caught up/.test(e.message ?? '')), 120_000, 1000);
    console.log(`[db-host-lost] ${stored.size} rows, all on the new member on ${spare.name}; ${seeded.message}`);
    expect(mine.some((e) => e.action === 'database_degraded' && (e.message ?? '').includes(`agent ${lost.name}`))).toBe(true);
    expect(mine.some((e) => e.action === 'database_update' && (e.message ?? '').includes(`placed on agent ${spare.name}`))).toBe(true);

    // The lost host returns: its old agent is refused (fenced), so the operator joins it again
    // with a new join token. It is sent none of its old members, and its agent removes its member.
    await lost.linkUp();
    await procs[lost.name]!.stop();
    delete procs[lost.name];
    const token = await call('POST', '/v4/fulcrum/join-tokens', { role: 'agent', id: lost.name, region: 'us-east' });
    expect(token.status).toBe(200);
    procs[lost.name] = lost.fulcrum(['agent', '--control-plane', fleet.grpc, '--state', join(dir, lost.name), '--runtime', 'process', '--join', token.body.token, '--node-pool', NODE_POOLS[lost.name]!]);
    await until('the returning host is up', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { id: string; state: string }[]).find((a) => a.id === lost.name)?.state === 'up' || undefined;
    }, 120_000, 1000);
    await until('the old member removed from the returning host', () => {
      const nodes = join(dir, lost.name, 'runtime', 'nodes');
      const left = existsSync(nodes) ? readdirSync(nodes).filter((n) => n.includes(`-db${id}-n`)) : [];
      return (!existsSync(join(dir, lost.name, 'databases', String(id))) && left.length === 0) || undefined;
    }, 120_000, 1000);
    const after = await call('GET', `${MYSQL}/${id}`);
    expect(after.body.status).toBe('active');
    expect(Object.keys(after.body.members).map((m) => hostOf(m)?.name)).not.toContain(lost.name);

    await fleet.stopAll();
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});

/** `fulcrum <args>` from the sources in the root namespace (the control plane's state folder is here). */
function fulcrumCli(args: string[]): Promise<string> {
  return new Promise((ok, fail) => {
    execFile(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), ...args], { cwd: repoRoot, env: { ...process.env, FULCRUM_FROM_SOURCE: '1' }, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) fail(new Error(`fulcrum ${args.join(' ')}: ${stderr || err.message}`));
      else ok(stdout);
    });
  });
}
