// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), pools inside its namespaces; its object store on its own bridge address).
import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { execFile } from 'node:child_process';
import { readFileSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot, until } from '../helpers/lab.js';
import { leftovers, sh } from '../helpers/hosts.js';
import { MYSQL, listensOn, singleUnderWrites, startHostsFleet, type HostsFleet } from '../helpers/fleet-hosts.js';
import { attempts, mysqlClient } from '../helpers/fleet-clients.js';

// A 1-node database whose host is destroyed (docs/multi-host.md, "A 1-node database on a lost
// host"): two agent hosts share one real object store (Swift + s3api over TLS, on the bridge's
// root address), a data plane pair serves hosts.primary, a client host writes through it. The
// database's host is destroyed (every process in it killed, its state folder and namespace
// deleted) and declared lost: the database comes back on the other host from the store (the
// base its archive took plus every archived binlog; no snapshot or auto backup needed), active, with the same hosts.primary, credentials and CA,
// and every row acknowledged before the recovery point is there. The test prints the recovery
// point's distance from the destruction and the time to recover.

const PREFIX = 'mrc1';
const SUBNET = 217;
const NB_POOL = '198.18.216.0/24';
const DB_POOL = '198.18.217.0/24';
const NODE_POOLS: Record<string, string> = { ag1: '198.18.218.0/29', ag2: '198.18.218.8/29' };
/** The agents' --binlog-archive-interval: the recovery point is at most about this far back. */
const ARCHIVE_S = 5;

describe('a 1-node database whose host is destroyed', () => {
  let f: HostsFleet;

  beforeAll(async () => {
    f = await startHostsFleet({ prefix: PREFIX, subnet: SUBNET, nbPool: NB_POOL, dbPool: DB_POOL, nodePools: NODE_POOLS, store: { archiveS: ARCHIVE_S } });
  }, 300_000);

  afterAll(async () => {
    await f?.close();
  });

  it('comes back on the other host from the object store with every row acknowledged before the recovery point, the same hosts.primary, credentials and CA', async () => {
    const { fleet, dir, hostOf, dpa, dpb, cl } = f;
    const { call, procs } = fleet;
    onTestFailed(() => console.log(f.explain()));
    // The client keeps the credentials and CA it was given at the start, for the whole test.
    const { id, db, host: lost, other, primary, creds, client, loop } = await singleUnderWrites(f, 'mrc-single');
    const ca = (await call('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate;
    // No snapshot and no auto backup yet: the recovery starts from the base the archive took.
    const writing = Date.now();
    // Several archive rounds of writes, so that rows are acknowledged before the recovery point
    // however long a round takes on a loaded machine.
    await until('writes for a few archive rounds', () => Date.now() - writing >= 4 * ARCHIVE_S * 1000 && attempts(loop).filter((a) => a.ok).length >= 40, 180_000, 200);

    // The host is destroyed: everything in it killed, its state folder and namespace deleted.
    const destroyedAt = Date.now();
    const { stdout } = await sh('ip', ['netns', 'pids', lost.ns]);
    for (const pid of stdout.split('\n').filter(Boolean).map(Number)) {
      try {
        process.kill(pid, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    await until(`nothing left in ${lost.name}`, async () => (await sh('ip', ['netns', 'pids', lost.ns])).stdout.trim() === '' || undefined, 30_000, 100);
    delete procs[lost.name];
    rmSync(join(dir, lost.name), { recursive: true, force: true });
    await sh('ip', ['netns', 'del', lost.ns]);
    const declared = await fulcrumCli(['host', 'lost', lost.name, '--state', join(dir, 'cp')]);
    expect(declared).toContain(`agent ${lost.name} is lost`);

    // Back on the other host, active, the same hosts.primary.
    const back = await until('active on the other host', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      if (r.body.status === 'failed') throw new Error(`database ${id} failed: ${JSON.stringify(r.body)}`);
      const m = Object.keys(r.body.members ?? {});
      return r.body.status === 'active' && m.length === 1 && hostOf(m[0]!) === other ? r.body : undefined;
    }, 600_000, 1000);
    const recoveredIn = Date.now() - destroyedAt;
    expect(back.hosts.primary).toBe(primary);
    expect((await call('GET', `${MYSQL}/${id}/credentials`)).body).toEqual(creds);
    expect((await call('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate).toBe(ca);

    // Writes succeed again through the same hosts.primary with the client's first credentials and CA.
    const resumed = await until('a write after the recovery succeeds', () => attempts(loop).find((a) => a.start > destroyedAt + recoveredIn - 1000 && a.ok), 120_000, 200);
    await loop.kill();

    const events = (await call('GET', '/v4/account/events?page_size=100')).body.data as { action: string; message: string | null; entity: { id: number } | null }[];
    const mine = events.filter((e) => e.entity?.id === id);
    const point = mine.map((e) => /recovered from the object store to (\S+Z)/.exec(e.message ?? '')?.[1]).find(Boolean);
    expect(point).toBeDefined();
    const pointMs = Date.parse(point!);
    expect(mine.some((e) => e.action === 'database_update' && (e.message ?? '').includes(`Placed on agent ${other.name}`))).toBe(true);
    expect(mine.some((e) => (e.message ?? '').startsWith(`Recovered on agent ${other.name}`))).toBe(true);

    // Every row acknowledged before the recovery point is there; rows acknowledged between it
    // and the destruction are what the recovery point gives up.
    const rows = await until('the rows read back', () => client.sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    const stored = new Set((rows as { id: number }[]).map((r) => r.id));
    const acked = attempts(loop).filter((a) => a.ok);
    const before = acked.filter((a) => a.end < pointMs);
    expect(before.length).toBeGreaterThan(0);
    expect(before.filter((a) => !stored.has(a.id)).map((a) => a.id)).toEqual([]);
    const given = acked.filter((a) => a.end >= pointMs && a.start < destroyedAt && !stored.has(a.id)).length;
    const stateOf = (db: number) => JSON.parse(readFileSync(join(dir, other.name, 'databases', String(db), 'state.json'), 'utf8')) as { forkBase?: { backupId: number; kind: string } };
    const from = stateOf(id).forkBase!;
    console.log(`[db-host-lost-single] host ${lost.name} destroyed; recovered on ${other.name} from its ${from.kind} base ${from.backupId} ${recoveredIn} ms later (first write after it at +${resumed.end - destroyedAt} ms); ` +
      `recovery point ${point}, ${destroyedAt - pointMs} ms before the destruction (--binlog-archive-interval ${ARCHIVE_S}); ${before.length} rows acknowledged before it all there, ${given} acknowledged after it lost`);
    // The archive uploads every ARCHIVE_S seconds; on a loaded machine a round can take longer.
    expect(destroyedAt - pointMs).toBeLessThan(60_000);

    // The same database, not a copy: its binlog goes on after the archive's end (so its archive
    // continues the lost host's chain), and a fork to the second of the recovery point, built on
    // the new host from the lost host's base and segments, holds every row acknowledged before
    // that second.
    const continues = /continues from GTID position (\S+)/.exec(mine.map((e) => e.message ?? '').find((m) => m.includes('continues from GTID')) ?? '')?.[1];
    expect(continues).toMatch(/^0-\d+-\d+/);
    const seqOf = (pos: string) => Number(/(?:^|,)0-\d+-(\d+)/.exec(pos)?.[1] ?? -1);
    const now = await until('the binlog position', () => client.sql('SELECT @@gtid_binlog_pos AS p'), 60_000, 1000);
    expect(seqOf(now[0].p)).toBeGreaterThan(seqOf(continues!));
    const T = Math.floor(pointMs / 1000) * 1000;
    const forked = await call('POST', MYSQL, {
      label: 'mrc-fork', region: 'us-east', type: 'g6-nanode-1', engine: `${db.engine}/${db.version}`, cluster_size: 1,
      allow_list: [`${cl.ip}/32`], fork: { source: id, restore_time: new Date(T).toISOString() },
    });
    expect(forked.status, JSON.stringify(forked.body)).toBe(200);
    const fork = await until('the fork active', async () => {
      const r = await call('GET', `${MYSQL}/${forked.body.id}`);
      if (r.body.status === 'failed') throw new Error(`fork failed: ${procs[other.name]?.output().slice(-4000)}`);
      return r.body.status === 'active' ? r.body : undefined;
    }, 600_000, 1000);
    await until('both data planes listen on the fork\'s hosts.primary', async () => (await listensOn(dpa, fork.hosts.primary, 3306)) && (await listensOn(dpb, fork.hosts.primary, 3306)), 120_000, 250);
    const forkClient = await mysqlClient(call, cl, forked.body.id, fork.hosts.primary);
    const forkRows = new Set(((await until('the fork\'s rows', () => forkClient.sql('SELECT id FROM fh.t'), 120_000, 1000)) as { id: number }[]).map((r) => r.id));
    expect(acked.filter((a) => a.end < T && !forkRows.has(a.id)).map((a) => a.id)).toEqual([]);
    expect([...forkRows].filter((i) => !stored.has(i))).toEqual([]);
    const forkBase = stateOf(forked.body.id).forkBase!;
    console.log(`[db-host-lost-single] binlog continues after ${continues}; a fork to ${new Date(T).toISOString()} built on ${other.name} from ${forkBase.kind} backup ${forkBase.backupId} holds ${forkRows.size} rows`);

    await f.close();
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
