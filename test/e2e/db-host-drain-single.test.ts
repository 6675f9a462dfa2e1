// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its object store on its own bridge address).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { until } from '../helpers/lab.js';
import { leftovers } from '../helpers/hosts.js';
import { MYSQL, attempts, fulcrumCli, longestPause, lostRows, singleUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';

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
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, store: { archiveS: ARCHIVE_S } });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('moves it to the other host through the object store under writes with no acknowledged row lost, and refuses a drain without capacity', async () => {
    const { fleet, dir, hostOf } = f;
    const { call, procs } = fleet;
    onTestFailed(() => console.log(f.explain()));
    const { id, host: drained, other, primary, creds, client, loop } = await singleUnderWrites(f, 'mds-single');
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

    await f.close();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 1_500_000);
});
