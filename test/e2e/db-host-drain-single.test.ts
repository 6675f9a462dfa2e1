// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its object store on its own bridge address).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { createHosts, leftovers, type Host, type HostNet } from '../helpers/hosts.js';
import { MYSQL, attempts, engineOf, fulcrumCli, holderOf, listensOn, longestPause, lostRows, mysqlClient, sixOf, startFleet, type Fleet } from '../helpers/fleet-hosts.js';
import { startObjectStore, type ObjectStore } from '../helpers/object-store.js';

// Draining the host of a 1-node database (docs/multi-host.md, "Draining a host"): two agent hosts
// share one real object store (Swift + s3api over TLS), a data plane pair serves hosts.primary, a
// client host writes through it. `POST /v4/fulcrum/agents/:id/drain` fences the database (read-only),
// ships its binlog to the store and rebuilds it on the other host from the store: it ends active
// there with the same hosts.primary and credentials, every acknowledged row present; the longest
// pause between acknowledged writes is printed. The old host removes its node but not the objects
// in the store. Draining the other host then is refused (nowhere to go). Nothing is left.

const PREFIX = 'mds';
const SUBNET = 237;
const NB_POOL = '198.18.236.0/24';
const DB_POOL = '198.18.237.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.238.0/29', ag2: '198.18.238.8/29' };
const ARCHIVE_S = 5;

describe('draining the host of a 1-node database', () => {
  let net: HostNet;
  let dir: string;
  let fleet: Fleet;
  let store: ObjectStore;
  let dpa: Host, dpb: Host, cl: Host;
  let agents: Host[];

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-mds-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag1', 'ag2', 'cl'] });
    const [cpHost, a, b, ag1, ag2, c] = net.hosts as [Host, Host, Host, Host, Host, Host];
    [dpa, dpb, cl, agents] = [a, b, c, [ag1, ag2]];
    store = await startObjectStore({ host: net.rootIp });
    fleet = await startFleet({ cpHost, dir, nbPool: NB_POOL, dbPool: DB_POOL });
    await fleet.dataplane(dpa, [dpb], 150);
    await fleet.dataplane(dpb, [dpa], 100);
    const storeArgs = ['--backup-store', `s3://${store.bucket}/us-east`, '--backup-store-endpoint', store.endpoint, '--backup-store-region', store.region,
      '--backup-store-path-style', '--backup-store-ca', store.caFile, '--backup-store-credentials', store.credentialsFile, '--binlog-archive-interval', String(ARCHIVE_S)];
    for (const h of agents) await fleet.agent(h, NODE_POOLS[h.name]!, sixOf(NODE_POOLS[h.name]!), storeArgs);
  }, 300_000);

  afterAll(async () => {
    await fleet?.stopAll();
    await net?.teardown();
    await store?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('moves it to the other host through the object store under writes with no acknowledged row lost, and refuses a drain without capacity', async () => {
    const { call, procs } = fleet;
    onTestFailed(() => console.log(`[control plane output]\n${fleet.cp.output().slice(-6000)}\n[agents]\n${agents.map((h) => `-- ${h.name}\n${procs[h.name]?.output().slice(-4000)}`).join('\n')}`));
    await until('two agents on the shared store', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as { connected: boolean }[]).filter((a) => a.connected).length === 2;
    }, 120_000, 500);
    const engine = await engineOf(fleet, agents[0]!);
    const created = await call('POST', MYSQL, {
      label: 'mds-single', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: [`${cl.ip}/32`],
    });
    expect(created.status).toBe(200);
    const id: number = created.body.id;
    const hostOf = (ip: string) => agents.find((h) => sixOf(NODE_POOLS[h.name]!).includes(ip));
    const db = await until(`database ${id} active on one agent host`, async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      if (r.body.status === 'failed') throw new Error(`database ${id} failed`);
      const m = Object.keys(r.body.members ?? {});
      return r.body.status === 'active' && m.length === 1 && hostOf(m[0]!) ? r.body : undefined;
    }, 600_000, 500);
    const drained = hostOf(Object.keys(db.members)[0]!)!;
    const other = agents.find((h) => h !== drained)!;
    const primary: string = db.hosts.primary;
    const creds = (await call('GET', `${MYSQL}/${id}/credentials`)).body;
    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    await holderOf(dpa, dpb, primary);
    const client = await mysqlClient(call, cl, id, primary);
    await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
    const loop = client.loop();
    // Writes both before the archive's first rounds and after its last one before the drain.
    await until('writes through hosts.primary for an archive round', async () => attempts(loop).filter((a) => a.ok).length >= 20
      && (await call('GET', `${MYSQL}/${id}`)).body.oldest_restore_time ? true : undefined, 180_000, 500);

    const started = Date.now();
    const r = await call('POST', `/v4/fulcrum/agents/${drained.name}/drain`);
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    expect(r.body).toMatchObject({ id: drained.name, draining: true, members_left: 1 });

    const moved = await until(`active on ${other.name}`, async () => {
      const x = await call('GET', `${MYSQL}/${id}`);
      if (x.body.status === 'failed') throw new Error(`database ${id} failed: ${JSON.stringify(x.body)}`);
      const m = Object.keys(x.body.members ?? {});
      return x.body.status === 'active' && m.length === 1 && hostOf(m[0]!) === other ? x.body : undefined;
    }, 600_000, 1000);
    const tookMs = Date.now() - started;
    expect(moved.hosts.primary).toBe(primary);
    expect((await call('GET', `${MYSQL}/${id}/credentials`)).body).toEqual(creds);
    await until(`no member left on ${drained.name}`, async () => {
      const v = ((await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; drain: { membersLeft: number } | null }[]).find((x) => x.id === drained.name);
      return v?.drain?.membersLeft === 0 || undefined;
    }, 120_000, 1000);

    // Writes go on through the same hosts.primary with the client's first credentials and CA.
    const okAfter = Date.now();
    await until('writes succeed after the move', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 120_000, 200);
    await loop.kill();
    const { acked, missing } = await lostRows(client, loop);
    expect(acked.length).toBeGreaterThan(20);
    expect(missing).toEqual([]);
    const pause = longestPause(attempts(loop), started, Date.now());
    const refusedWrites = attempts(loop).filter((a) => !a.ok && a.start >= started);
    const kinds = [...new Set(refusedWrites.map((a) => a.err ?? '?'))].join(', ');
    console.log(`[db-host-drain-single] ${drained.name} drained in ${tookMs} ms; longest pause between acknowledged writes ${pause} ms; ${acked.length} acknowledged rows all there; refused writes meanwhile: ${refusedWrites.length} (${kinds})`);

    const events = (await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[];
    const mine = events.filter((e) => e.entity?.id === id).map((e) => e.message ?? '');
    expect(mine.some((m) => m.startsWith(`Placed on agent ${other.name} (agent ${drained.name} is draining)`))).toBe(true);
    const done = mine.find((m) => m.startsWith(`Moved to agent ${other.name}`));
    expect(done).toBeDefined();
    console.log(`[db-host-drain-single] ${done}`);

    // The old host removed its node and folder, and kept the objects in the store: the new host's
    // archive continues them (a fork to now, built from the store, would need them).
    await until(`the database's folder gone from ${drained.name}`, () => !existsSync(join(dir, drained.name, 'databases', String(id))) || undefined, 120_000, 500);
    expect(procs[drained.name]!.output()).toContain('its backups and binlog archive in the store are kept');

    // The other host is the only one left and it holds the database: a drain of it is refused.
    const refused = await call('POST', `/v4/fulcrum/agents/${other.name}/drain`);
    expect(refused.status).toBe(400);
    expect(JSON.stringify(refused.body.errors)).toMatch(/cannot be drained: .*no other host to go to/);
    expect(await fulcrumCli(['host', 'undrain', drained.name, '--state', join(dir, 'cp')])).toContain(`agent ${drained.name} is not draining; 0 member(s) on it`);

    await fleet.stopAll();
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
