/**
 * Database endpoints served by a data plane (docs/databases.md, "Database endpoints"): a real
 * agent runs two 1-node databases on real mariadbd processes (process runtime); a real data
 * plane engine serves their endpoints as the control plane builds them. Shows that an allowed
 * client is seen by the server with its own address (the PROXY header from the data plane's
 * address is accepted), that a client outside the allow_list is refused before a byte reaches
 * the server, and that a new primary in the snapshot takes the new connections while the
 * connections to the old one are closed.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Connection } from 'mysql2/promise';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import { silentLogger } from '../../../lib/logger.js';
import { createAgentFixture, type AgentFixture } from '../agent/agent-fixture.js';
import { connectFrom, desiredDb, type Driver } from '../agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';

// Serial lane. Slot 29 is physical-base-writes', which runs alone after both lanes, so the two
// never run at once; slot 31 was fork-after-failover's, a concurrent file that could run beside it.
const SLOT = 29;

describe('database endpoints on a data plane (real mariadbd, process runtime)', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let a: DesiredDatabase;
  let b: DesiredDatabase;
  let switcher: ProxyEngine | undefined;
  const open: Connection[] = [];

  const client = async (source: string, host: string, port = 3306): Promise<Connection> => {
    const c = await connectFrom({ source, host, port, user: 'linroot', password: a.rootPassword! });
    open.push(c);
    return c;
  };
  const endpointStats = (id: number) => [...driver.dataplane!.engine.databaseEndpoints()].find((e) => e.current.databaseId === id && e.current.role === 'primary')!.stats;
  const primaryOf = (id: number) => Object.entries(driver.db(id)?.members ?? {}).find(([, role]) => role === 'primary')?.[0];
  const memberOf = (id: number) => primaryOf(id)!;

  beforeAll(async () => {
    const engine = (await detectLocalCatalogue())[0];
    if (!engine) throw new Error('no local MariaDB server binary');
    fx = await createAgentFixture({ id: 'agent-dp-endpoint', slot: SLOT, reconcileIntervalMs: 300 });
    driver = fx.driver;
    await fx.startAgent();
    const common = { engineId: engine.id, version: engine.version, sslConnection: false, allowList: ['127.0.0.2/32', '127.0.0.3/32'] };
    a = desiredDb({ id: 311, ...common, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2` });
    b = desiredDb({ id: 312, ...common, hostPrimary: `${fx.net}.3`, hostSecondary: `${fx.net}.4` });
    driver.setDatabases([a, b]);
    await driver.waitFor(() => driver.db(311)?.status === 'active' && driver.db(312)?.status === 'active', 120_000, 'both active');
    await driver.waitFor(() => primaryOf(311) && primaryOf(312), 30_000, 'members reported');
  }, 180_000);

  afterAll(async () => {
    for (const c of open) c.destroy();
    await switcher?.close();
    await fx?.close();
  });

  it('an allowed client is seen by the server with its own address', async () => {
    // The members accept PROXY headers from the data plane once the agent has set them, and the
    // data plane routes once the agent has reported the primary: retried until both hold.
    let c: Connection | undefined;
    for (const end = Date.now() + 30_000; !c && Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
      c = await client('127.0.0.2', a.hostPrimary!).catch(() => undefined);
    }
    if (!c) throw new Error('no connection through the endpoint within 30 s');
    const [rows] = await c.query('SELECT USER() AS u, (SELECT host FROM information_schema.processlist WHERE id = CONNECTION_ID()) AS h');
    const row = (rows as Array<{ u: string; h: string }>)[0]!;
    expect(row.u).toBe('linroot@127.0.0.2');
    expect(row.h).toMatch(/^127\.0\.0\.2:\d+$/);
  });

  it('a client outside the allow_list is refused by the data plane before any byte reaches the server', async () => {
    const before = { ...endpointStats(311), refused: { ...endpointStats(311).refused } };
    const err = await client('127.0.0.4', a.hostPrimary!).then(() => null, (e: Error) => e);
    expect(err).toBeInstanceOf(Error);
    expect(endpointStats(311).refused.allow_list).toBe(before.refused.allow_list + 1);
    // Never accepted, so no connection to the member was opened for it.
    expect(endpointStats(311).accepted).toBe(before.accepted);
  });

  it('a new primary in the snapshot takes new connections; connections to the old one are closed', async () => {
    const ca = await client('127.0.0.2', a.hostPrimary!);
    await ca.query('CREATE DATABASE IF NOT EXISTS marker_a');
    const cb = await client('127.0.0.2', b.hostPrimary!);
    await cb.query('CREATE DATABASE IF NOT EXISTS marker_b');

    // A second data plane with one endpoint, first routed to A's member, then to B's.
    switcher = createProxyEngine({ logger: silentLogger(), endpoints: { sourceAddress: driver.dataplane!.source } });
    const address = `${fx.net}.9`;
    const snapshot = (version: number, member: string) => ({
      version,
      databaseEndpoints: [{ databaseId: 311, role: 'primary', address, port: 3306, allowList: ['127.0.0.2/32'], targets: [{ host: member, port: 3306 }] }],
    });
    await switcher.apply(snapshot(1, memberOf(311)));
    const markers = async (c: Connection) => ((await c.query("SHOW DATABASES LIKE 'marker\\_%'"))[0] as Array<Record<string, string>>).map((r) => Object.values(r)[0]);
    const old = await client('127.0.0.2', address);
    expect(await markers(old)).toEqual(['marker_a']);

    await switcher.apply(snapshot(2, memberOf(312)));
    const oldErr = await old.query('SELECT 1').then(() => null, (e: Error) => e);
    expect(oldErr).toBeInstanceOf(Error);
    const fresh = await client('127.0.0.2', address);
    expect(await markers(fresh)).toEqual(['marker_b']);
    const [rows] = await fresh.query('SELECT USER() AS u');
    expect((rows as Array<{ u: string }>)[0]!.u).toBe('linroot@127.0.0.2');
  });
});
