// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { createHosts, leftovers, printedJson, watch, type Host, type HostNet } from '../helpers/hosts.js';
import { MYSQL, engineOf, holderOf, listensOn, sixOf, startFleet, waitActive, type Fleet } from '../helpers/fleet-hosts.js';
import { mysqlClient } from '../helpers/fleet-clients.js';

// The whole fleet across hosts (docs/multi-host.md): eight network-namespace hosts (control
// plane; two data planes in pair mode; three process-runtime agents, each with its members'
// address range on its own link; a client; a backend host with two HTTP backends). Through the
// API a NodeBalancer and a 3-node database are created; the client host sends HTTP traffic to
// the NodeBalancer's address and writes with mysql2 through hosts.primary. Nothing is left.

const PREFIX = 'fhmh8';
const SUBNET = 159;
const NB_POOL = '198.18.160.0/24';
const DB_POOL = '198.18.161.0/24';
/** Each agent's members listen on its own range, so a member's address names its host. */
const NODE_POOLS: Record<string, string> = { ag1: '198.18.162.0/29', ag2: '198.18.162.8/29', ag3: '198.18.162.16/29' };

const BACKEND = `
const [ip, port, name] = process.argv.slice(1);
require('http').createServer((req, res) => res.end('hello from ' + name)).listen(Number(port), ip, () => console.log('listening'));
`;

/** `count` GETs from inside a host, a new connection each; prints one JSON line per request. */
const HTTP_CLIENT = `
const http = require('http');
const [ip, port, count] = process.argv.slice(1);
(async () => {
  for (let i = 0; i < Number(count); i++) {
    const r = await new Promise((done) => {
      const req = http.get({ host: ip, port: Number(port), path: '/', agent: false, timeout: 3000 }, (res) => {
        let b = ''; res.on('data', (d) => (b += d)); res.on('end', () => done({ status: res.statusCode, body: b }));
      });
      req.on('timeout', () => { req.destroy(); done({ status: 0, body: 'timeout' }); });
      req.on('error', (e) => done({ status: 0, body: e.code || e.message }));
    });
    console.log(JSON.stringify(r));
  }
})();
`;

describe('a fleet on eight hosts', () => {
  let net: HostNet;
  let dir: string;
  let fleet: Fleet;
  let dpa: Host, dpb: Host, cl: Host, be: Host;
  let agents: Host[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-fhmh8-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag1', 'ag2', 'ag3', 'cl', 'be'] });
    const [cpHost, a, b, ag1, ag2, ag3, c, bk] = net.hosts as [Host, Host, Host, Host, Host, Host, Host, Host];
    [dpa, dpb, cl, be, agents] = [a, b, c, bk, [ag1, ag2, ag3]];
    fleet = await startFleet({ cpHost, dir, nbPool: NB_POOL, dbPool: DB_POOL, backendNetworks: `198.19.${SUBNET}.0/24` });
    await fleet.dataplane(dpa, [dpb], 150);
    await fleet.dataplane(dpb, [dpa], 100);
    for (const h of agents) await fleet.agent(h, NODE_POOLS[h.name]!, sixOf(NODE_POOLS[h.name]!));
    for (const [port, name] of [[8001, 'one'], [8002, 'two']] as const) be.spawn(process.execPath, ['-e', BACKEND, be.ip, String(port), name]);
  }, 300_000);

  afterAll(async () => {
    await fleet?.stopAll();
    await net?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('serves a NodeBalancer and a 3-node database to the client host through the data plane pair, and leaves nothing behind', async () => {
    const { call, procs } = fleet;
    onTestFailed(() => console.log(`[control plane output]\n${fleet.cp.output().slice(-6000)}`));

    // The NodeBalancer: traffic from the client host reaches both backends on the backend host.
    const nb = await call('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'fhmh8-nb',
      configs: [{ port: 80, protocol: 'http', check: 'none', nodes: [{ label: 'one', address: `${be.ip}:8001` }, { label: 'two', address: `${be.ip}:8002` }] }],
    });
    expect(nb.status).toBe(200);
    const vip: string = nb.body.ipv4;
    expect(vip.startsWith('198.18.160.')).toBe(true);
    await until('both data planes listen on the NodeBalancer', async () => (await listensOn(dpa, vip, 80)) && (await listensOn(dpb, vip, 80)), 120_000, 250);
    await holderOf(dpa, dpb, vip);
    const bodies = await until('20 requests from the client host answered', async () => {
      const p = watch(cl.spawn(process.execPath, ['-e', HTTP_CLIENT, vip, '80', '20']));
      await new Promise((ok) => p.proc.once('close', ok));
      const lines = printedJson<{ status: number; body: string }>(p);
      return lines.length === 20 && lines.every((l) => l.status === 200) ? lines.map((l) => l.body) : undefined;
    }, 60_000, 1000);
    expect(new Set(bodies)).toEqual(new Set(['hello from one', 'hello from two']));

    // The 3-node database, written from the client host through hosts.primary, once every agent
    // is connected and says it can run part of a cluster (placement spreads over those only).
    await until('three agents that run members across hosts', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { id: string; connected: boolean; membersAcrossHosts: boolean }[]).filter((a) => a.connected && a.membersAcrossHosts).length === 3;
    }, 120_000, 500);
    const created = await call('POST', MYSQL, {
      label: 'fhmh8-three', region: 'us-east', type: 'g6-nanode-1', engine: await engineOf(fleet, agents[0]!), cluster_size: 3, allow_list: [`${cl.ip}/32`],
    });
    expect(created.status).toBe(200);
    const id: number = created.body.id;
    await waitActive(fleet, id, 600_000, () => agents.map((h) => procs[h.name]!.output().slice(-2000)).join('\n'));
    // Each agent reports its own member; the control plane assembles the three.
    const db = await until('three members reported', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      return Object.keys(r.body.members ?? {}).length === 3 ? r.body : undefined;
    }, 60_000, 500);
    const primary: string = db.hosts.primary;
    expect(primary.startsWith('198.18.161.')).toBe(true);
    const members = Object.keys(db.members as Record<string, string>);
    expect(members).toHaveLength(3);
    const hostOf = (ip: string) => agents.find((h) => sixOf(NODE_POOLS[h.name]!).includes(ip))?.name;
    // Anti-affinity: one member on each agent host.
    expect(new Set(members.map(hostOf))).toEqual(new Set(['ag1', 'ag2', 'ag3']));
    expect(Object.values(db.members).filter((r) => r === 'primary')).toHaveLength(1);
    console.log(`[multi-host] 3-node database members: ${members.map((m) => `${m} on ${hostOf(m)} (${db.members[m]})`).join(', ')}`);

    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    await holderOf(dpa, dpb, primary);
    const client = await mysqlClient(call, cl, id, primary);
    await until('writes through hosts.primary', () => client.sql(
      'CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'REPLACE INTO fh.t (id) VALUES (1), (2), (3)', 'SELECT 1 AS one',
    ), 120_000, 1000);
    const rows = await client.sql('SELECT COUNT(*) AS n FROM fh.t');
    expect(rows?.[0]?.n).toBe(3);
    // The write reached the replicas on the other two hosts (replication across hosts, over TLS).
    for (const m of members.filter((x) => db.members[x] !== 'primary')) {
      const replica = await mysqlClient(call, cl, id, m);
      await until(`the rows on the replica ${m} (${hostOf(m)})`, async () => (await replica.sql('SELECT COUNT(*) AS n FROM fh.t'))?.[0]?.n === 3, 60_000, 1000);
    }

    await fleet.stopAll();
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_200_000);
});
