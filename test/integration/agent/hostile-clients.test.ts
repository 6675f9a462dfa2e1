// integration-lane: concurrent (agent-fixture slot 27: its own 127.76/78/79.27 blocks, port 0, temp folders; client source addresses only as local ends).
/**
 * A database endpoint (served by the data plane in front of the agent's nodes) under hostile
 * clients: garbage instead of the MySQL protocol, connections from addresses the allow_list
 * refuses, and floods of connects and drops. The endpoint and the node must survive, leave
 * nothing open behind, and keep serving the allowed client.
 * Deterministic: garbage comes from a seeded generator.
 */
import { connect as netConnect, type Socket } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from './agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from './control-plane-driver.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { garbage, prng } from '../../helpers/random.js';


const ALLOWED = '127.0.27.2';
const REFUSED = '127.0.27.3';

describe('database endpoint under hostile clients', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const net = testNet('127.78', 27);

  beforeAll(async () => {
    fx = await createAgentFixture({ id: 'agent-hostile', slot: 27 });
    driver = fx.driver;
    await fx.startAgent();
    const [engine] = await detectLocalCatalogue();
    db = desiredDb({ id: 1, engineId: engine!.id, version: engine!.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: [`${ALLOWED}/32`] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(1)?.status === 'active' && driver.db(1), 30_000, 'active');
  }, 45_000);

  afterAll(async () => {
    await fx?.close();
  });

  const legit = () => connectFrom({ source: ALLOWED, host: db.hostPrimary!, port: 3306, user: 'linroot', password: 'Initial.Pass_01', ca: driver.db(1)!.caCertPem });

  /** The allowed client is served, and no proxied connection lingers on the server. */
  async function stillServing(): Promise<void> {
    const c = await legit();
    try {
      const [rows] = await c.query('SELECT 1 AS one');
      expect((rows as Array<{ one: number }>)[0]!.one).toBe(1);
      const t0 = Date.now();
      for (;;) {
        const [st] = await c.query("SHOW STATUS LIKE 'Threads_connected'");
        const n = Number((st as Array<{ Value: string }>)[0]!.Value);
        if (n === 1) break;
        if (Date.now() - t0 > 15_000) throw new Error(`${n} server connections still open`);
        await new Promise((r) => setTimeout(r, 100));
      }
    } finally {
      await c.end();
    }
  }

  /** Opens a connection from `source`, runs `act`, resolves with what came back once it closes. */
  function session(source: string, act: (s: Socket) => void, ms = 15_000): Promise<{ got: number; timedOut: boolean }> {
    return new Promise((resolve) => {
      const s = netConnect({ host: db.hostPrimary!, port: 3306, localAddress: source });
      let got = 0;
      const timer = setTimeout(() => {
        s.destroy();
        resolve({ got, timedOut: true });
      }, ms);
      s.on('data', (d: Buffer) => (got += d.length));
      s.on('error', () => undefined);
      s.on('close', () => {
        clearTimeout(timer);
        resolve({ got, timedOut: false });
      });
      act(s);
    });
  }

  it('survives garbage instead of the MySQL protocol and keeps serving the allowed client', async () => {
    const rand = prng(42);
    for (let round = 0; round < 4; round++) {
      const results = await Promise.all(Array.from({ length: 40 }, (_, i) => session(ALLOWED, (s) => {
        s.once('connect', () => {
          const size = i % 4 === 0 ? 200_000 : 1 + Math.floor(rand() * 3000);
          const junk = garbage(rand, size);
          // Some clients wait for the server's greeting before answering it with garbage, so at
          // least these must have been let through, however loaded the machine is.
          if (i % 5 === 1) s.once('data', () => s.end(junk));
          else if (i % 3 === 0) s.end(junk);
          else {
            s.write(junk);
            setTimeout(() => s.resetAndDestroy(), Math.floor(rand() * 30));
          }
        });
      })));
      // Every one was let through to the server (which greets first) and closed, none left hanging.
      for (const r of results) expect(r.timedOut).toBe(false);
      expect(results.filter((r) => r.got > 0).length).toBeGreaterThan(0);
      await stillServing();
    }
    // A client that sends garbage and then keeps the connection open is closed by the server's
    // handshake timeout, not kept forever, and does not hold anyone else up.
    const stuck = session(ALLOWED, (s) => s.once('connect', () => s.write(garbage(rand, 10))), 20_000);
    await stillServing();
    expect((await stuck).timedOut).toBe(false);
  }, 55_000);

  it('closes connections from disallowed addresses at once, without a byte', async () => {
    const results = await Promise.all(Array.from({ length: 300 }, (_, i) => session(REFUSED, (s) => {
      if (i % 2 === 0) s.once('connect', () => s.write('\x00\x01garbage'));
    }, 5000)));
    for (const r of results) expect(r).toEqual({ got: 0, timedOut: false });
    await stillServing();
  }, 30_000);

  it('survives floods of connects and drops', async () => {
    const rand = prng(7);
    for (let batch = 0; batch < 8; batch++) {
      await Promise.all(Array.from({ length: 125 }, () => session(rand() < 0.2 ? REFUSED : ALLOWED, (s) => {
        const how = Math.floor(rand() * 3);
        if (how === 0) s.destroy();
        else s.once('connect', () => (how === 1 ? s.resetAndDestroy() : s.end()));
      }, 10_000)));
    }
    await stillServing();
  }, 55_000);
});
