// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { createHosts, leftovers, type Host, type HostNet } from '../helpers/hosts.js';
import { MYSQL, engineOf, holderOf, holds, listensOn, processesIn, sixOf, startFleet, waitActive, type Fleet } from '../helpers/fleet-hosts.js';
import { attempts, mysqlClient } from '../helpers/fleet-clients.js';

// Database endpoints that outlive a host (docs/multi-host.md, "Database endpoints in a pair"):
// hosts.primary is served by a pair of data planes, its address held through keepalived. On
// network-namespace hosts (control plane, two data planes, an agent running mariadbd as
// processes, a client), a 1-node and a 3-node database are created through the API and written
// with mysql2 from the client host through hosts.primary. Then the agent on the database's host is SIGKILLed
// (its mariadbd keeps running) and, during the client's write loop, the data plane holding the
// endpoint address is SIGKILLed: writes succeed again through hosts.primary (the gap is printed)
// and no acknowledged row is lost; the 3-node database takes a write through its hosts.primary
// too. Everything is removed afterwards.

const PREFIX = 'fhdbx';
const SUBNET = 157;
const DB_POOL = '198.18.157.0/24';
/** The addresses the agent's members listen on: put on the agent host's link, as an operator would. */
const NODE_POOL = '198.18.158.0/29';

describe('database endpoints on a data plane pair', () => {
  let net: HostNet;
  let dir: string;
  let fleet: Fleet;
  let dpa: Host, dpb: Host, ag: Host, cl: Host;

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-fhdbx-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag', 'cl'] });
    const [cpHost] = net.hosts as [Host];
    [, dpa, dpb, ag, cl] = net.hosts as [Host, Host, Host, Host, Host];
    fleet = await startFleet({ cpHost, dir, nbPool: '198.18.156.0/24', dbPool: DB_POOL });
    // Both data planes join before the database exists, so the member accepts PROXY headers from both.
    await fleet.dataplane(dpa, [dpb], 150);
    await fleet.dataplane(dpb, [dpa], 100);
    await fleet.agent(ag, NODE_POOL, sixOf(NODE_POOL));
  }, 300_000);

  afterAll(async () => {
    await fleet?.stopAll();
    await net?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps hosts.primary of a 1-node and a 3-node database writable from the client host when the agent and then the data plane holding the address are SIGKILLed, and leaves nothing behind', async () => {
    const { call, procs } = fleet;
    onTestFailed(() => console.log(`[control plane output]\n${fleet.cp.output().slice(-6000)}`));
    const engine = await engineOf(fleet, ag);
    const created = await call('POST', MYSQL, { label: 'fhdbx-one', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: [`${cl.ip}/32`] });
    expect(created.status).toBe(200);
    // A 3-node database on the same agent rides through the same kills.
    const created3 = await call('POST', MYSQL, { label: 'fhdbx-three', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, allow_list: [`${cl.ip}/32`] });
    expect(created3.status).toBe(200);
    const id: number = created.body.id;
    const db = await waitActive(fleet, id, 480_000, () => procs.ag!.output().slice(-4000));
    const db3 = await waitActive(fleet, created3.body.id, 600_000, () => procs.ag!.output().slice(-4000));
    const primary: string = db.hosts.primary;
    const primary3: string = db3.hosts.primary;
    expect(primary.startsWith('198.18.157.')).toBe(true);
    expect(primary3.startsWith('198.18.157.')).toBe(true);
    const client = await mysqlClient(call, cl, id, primary);
    const client3 = await mysqlClient(call, cl, db3.id, primary3);

    // Both data planes listen on the endpoint (the standby through nonlocal bind), one holds it.
    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    const holder = await holderOf(dpa, dpb, primary);
    const other = holder === dpa ? dpb : dpa;
    // One VRRP instance: the holder holds every endpoint address.
    await until('both data planes listen on the 3-node hosts.primary', async () => (await listensOn(dpa, primary3, 3306)) && (await listensOn(dpb, primary3, 3306)), 120_000, 250);
    expect(await holderOf(dpa, dpb, primary3)).toBe(holder);

    // Written from the client host through hosts.primary; the member trusts both data planes' PROXY headers.
    await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
    await until('a table through the 3-node hosts.primary', () => client3.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'REPLACE INTO fh.t (id) VALUES (1)'), 120_000, 1000);
    for (const c of [client, client3]) {
      await until('the primary member accepts PROXY headers from both data planes', async () => {
        const rows = await c.sql('SELECT @@global.proxy_protocol_networks AS n');
        const n = String(rows?.[0]?.n ?? '');
        return n.includes(dpa.ip) && n.includes(dpb.ip);
      }, 60_000, 1000);
    }

    // The agent on the database's host dies; its mariadbd keeps running and serving.
    await procs.ag!.kill();
    delete procs.ag;
    expect((await processesIn(ag)).some((p) => /mariadbd|mysqld/.test(p))).toBe(true);

    const loop = client.loop();
    await until('writes succeed without the agent', () => attempts(loop).filter((a) => a.ok).length >= 3, 60_000, 100);

    // The data plane holding hosts.primary dies too.
    const killedAt = Date.now();
    await procs[holder.name]!.kill();
    delete procs[holder.name];
    const first = await until('a write begun after the SIGKILL succeeds', () => attempts(loop).find((a) => a.start > killedAt && a.ok), 60_000, 100);
    const failed = attempts(loop).filter((a) => a.start > killedAt - 1000 && a.start < first.start && !a.ok);
    console.log(`[db-endpoint-failover] SIGKILL of the agent, then of the data plane on ${holder.name}: writes through hosts.primary succeeded again after ${first.end - killedAt} ms (${failed.length} failed attempts in between: ${[...new Set(failed.map((a) => a.err))].join(', ')})`);
    expect(await holds(other, primary)).toBe(true);
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    await loop.kill();

    // No acknowledged row is lost.
    const acked = attempts(loop).filter((a) => a.ok).map((a) => a.id);
    const rows = await until('the rows read back', () => client.sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    const stored = new Set((rows as { id: number }[]).map((r) => r.id));
    expect(acked.length).toBeGreaterThan(0);
    expect(acked.filter((i) => !stored.has(i))).toEqual([]);
    // The 3-node database is writable through its hosts.primary after both kills too.
    expect(await holds(other, primary3)).toBe(true);
    const rows3 = await until('a write through the 3-node hosts.primary', () => client3.sql('REPLACE INTO fh.t (id) VALUES (2)', 'SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    expect((rows3 as { id: number }[]).map((r) => r.id)).toEqual([1, 2]);

    await fleet.stopAll();
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 900_000);
});
