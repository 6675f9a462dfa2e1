import { join } from 'node:path';
import pg from 'pg';
import { beforeAll, describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../../control-plane/main.js';
import { openPostgresStore } from '../../../control-plane/store/postgres/store.js';
import { VersionLedger } from '../../../control-plane/push/snapshot-cache.js';
import type { ConfigSnapshot__Output } from '../../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import { api } from '../../helpers/lab.js';
import { waitFor } from '../../helpers/backends.js';
import { startScriptedAgent } from '../databases/scripted-agent.js';
import { scriptedDataplane as dataplane, usePgReplicas } from './pg-replicas.js';

/**
 * Two control-plane replicas on one PostgreSQL database (docs/architecture.md, "The store"): a
 * write through replica A reaches a data plane connected to replica B, and exactly one replica
 * holds the lease for background work, which moves when its holder closes.
 */
describe('control-plane replicas on one PostgreSQL store', () => {
  const replicas = usePgReplicas('harp');
  let a: ControlPlane | undefined;
  let b: ControlPlane | undefined;

  beforeAll(async () => {
    a = await replicas.start();
    b = await replicas.start();
  }, 180_000);

  it('a NodeBalancer created and changed through replica A reaches a data plane on replica B within 5 s', async () => {
    const dp = dataplane(b!.grpcAddress, 'harp-dp-1');
    try {
      await waitFor(() => dp.got.length > 0, 20_000);
      const viaA = api(a!.apiUrl, a!.adminToken);
      const made = await viaA('POST', '/v4/nodebalancers', {
        region: 'us-east', label: 'harp-nb', configs: [{ port: 8080, protocol: 'tcp', nodes: [{ label: 'node-1', address: '10.0.0.10:80' }] }],
      });
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      const id = made.body.id as number;
      const hasNb = (s: ConfigSnapshot__Output) => s.nodebalancers.some((nb) => Number(nb.id) === id);
      let start = Date.now();
      await waitFor(() => dp.got.some(hasNb), 5_000);
      expect(Date.now() - start).toBeLessThan(5_000);

      const configId = (await viaA('GET', `/v4/nodebalancers/${id}/configs`)).body.data[0].id;
      const nodeId = (await viaA('GET', `/v4/nodebalancers/${id}/configs/${configId}/nodes`)).body.data[0].id;
      start = Date.now();
      const moved = await viaA('PUT', `/v4/nodebalancers/${id}/configs/${configId}/nodes/${nodeId}`, { address: '10.0.0.11:80' });
      expect(moved.status).toBe(200);
      await waitFor(() => JSON.stringify(dp.got.at(-1)).includes('10.0.0.11:80'), 5_000);
      expect(Date.now() - start).toBeLessThan(5_000);
    } finally {
      dp.close();
    }
  }, 60_000);

  it('both replicas send the same content under the same version', async () => {
    const onA = dataplane(a!.grpcAddress, 'harp-dp-a');
    const onB = dataplane(b!.grpcAddress, 'harp-dp-b');
    try {
      const viaB = api(b!.apiUrl, b!.adminToken);
      const made = await viaB('POST', '/v4/nodebalancers', {
        region: 'us-east', label: 'harp-nb-2', configs: [{ port: 8081, protocol: 'tcp', nodes: [{ label: 'node-1', address: '10.0.0.20:80' }] }],
      });
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      const has = (s: ConfigSnapshot__Output | undefined) => s?.nodebalancers.some((nb) => Number(nb.id) === made.body.id) ?? false;
      await waitFor(() => has(onA.got.at(-1)) && has(onB.got.at(-1)), 10_000);
      const ids = (s: ConfigSnapshot__Output) => s.nodebalancers.map((nb) => Number(nb.id)).sort();
      expect(ids(onA.got.at(-1)!)).toEqual(ids(onB.got.at(-1)!));
      expect(onA.got.at(-1)!.version).toBe(onB.got.at(-1)!.version);
    } finally {
      onA.close();
      onB.close();
    }
  }, 60_000);

  it('a database created through replica A reaches an agent on replica B, and what B\'s agent reports reaches data planes on A', async () => {
    // Reporting every 3 s as a real agent does: `active` waits for the data planes of both
    // replicas to apply the routes (docs/databases.md, "When a database is active"), and replica B
    // learns of replica A's data plane's ACK from the store at its agent's next report.
    const agent = startScriptedAgent(b!.grpcAddress, { id: 'harp-agent', region: 'us-east', heartbeatMs: 3000 });
    const onA = dataplane(a!.grpcAddress, 'harp-dp-db-a');
    const onB = dataplane(b!.grpcAddress, 'harp-dp-db-b');
    try {
      const viaA = api(a!.apiUrl, a!.adminToken);
      // Connected: replica B has sent it its (empty) desired state.
      await waitFor(() => agent.desired(), 10_000);
      const engines = (await viaA('GET', '/v4/databases/engines')).body.data as { id: string }[];
      expect(engines.length).toBeGreaterThan(0);
      const made = await viaA('POST', '/v4/databases/mysql/instances', { label: 'harp-db', region: 'us-east', type: 'g6-standard-1', engine: engines[0]!.id, allow_list: ['127.0.0.2/32'] });
      expect(made.status, JSON.stringify(made.body)).toBe(200);
      const id = made.body.id as number;
      const start = Date.now();
      await waitFor(() => agent.desired()?.databases.some((d) => Number(d.id) === id), 5_000);
      expect(Date.now() - start).toBeLessThan(5_000);
      // The agent on B reports it active; B's observer writes that, and A's API and data planes follow.
      await waitFor(async () => (await viaA('GET', `/v4/databases/mysql/instances/${id}`)).body.status === 'active', 20_000);
      const eps = (s: ConfigSnapshot__Output | undefined) => JSON.stringify((s?.databaseEndpoints ?? []).filter((e) => Number(e.databaseId) === id));
      await waitFor(() => eps(onB.got.at(-1)) !== '[]' && eps(onA.got.at(-1)) === eps(onB.got.at(-1)), 10_000);
    } finally {
      agent.close();
      onA.close();
      onB.close();
    }
  }, 60_000);

  it('two replicas asking for versions at once issue one version per content', async () => {
    const stores = [
      await openPostgresStore(replicas.url, { kekFile: join(replicas.stateDir, 'keys', 'kek') }),
      await openPostgresStore(replicas.url, { kekFile: join(replicas.stateDir, 'keys', 'kek') }),
    ];
    try {
      const ledgers = stores.map((s) => new VersionLedger(s.kv, 'harp_version'));
      // The same content asked for 16 times from each replica at once: one version for all.
      const same = await Promise.all(Array.from({ length: 32 }, (_, i) => ledgers[i % 2]!.versionFor('harp:same', 'hash-1')));
      expect(new Set(same).size).toBe(1);
      // Different keys at once: every one a version of its own, none issued twice.
      const distinct = await Promise.all(Array.from({ length: 20 }, (_, i) => ledgers[i % 2]!.versionFor(`harp:k${i}`, 'hash-1')));
      expect(new Set(distinct).size).toBe(20);
      expect(Math.min(...distinct)).toBeGreaterThan(same[0]!);
    } finally {
      for (const s of stores) await s.close();
    }
  }, 60_000);

  it('a lease whose session dies is taken again, by one replica', async () => {
    const holders = () => [a, b].filter((cp) => cp?.context.replicas.leaseHeld());
    await waitFor(() => holders().length === 1, 10_000);
    const admin = new pg.Client({ connectionString: replicas.url });
    await admin.connect();
    try {
      const leasePid = async () => (await admin.query("SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted", [0x46554c45])).rows[0]?.pid as number | undefined;
      const before = await leasePid();
      expect(before).toBeDefined();
      await admin.query('SELECT pg_terminate_backend($1)', [before]);
      await waitFor(async () => {
        const now = await leasePid();
        return now !== undefined && now !== before && holders().length === 1;
      }, 10_000);
    } finally {
      await admin.end();
    }
  }, 60_000);

  it('exactly one replica holds the lease, and the other takes it within a few seconds of the holder closing', async () => {
    const holders = () => [a, b].filter((cp) => cp?.context.replicas.leaseHeld());
    await waitFor(() => holders().length === 1, 10_000);
    // Held steadily by one: never both, over several lease ticks.
    for (let i = 0; i < 10; i++) {
      expect(holders().length).toBe(1);
      await new Promise((r) => setTimeout(r, 300));
    }
    const holder = holders()[0]!;
    const other = holder === a ? b! : a!;
    expect(other.context.replicas.leaseHeld()).toBe(false);
    await replicas.close(holder);
    const start = Date.now();
    await waitFor(() => other.context.replicas.leaseHeld(), 10_000);
    expect(Date.now() - start).toBeLessThan(10_000);
  }, 60_000);
});
