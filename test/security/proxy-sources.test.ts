/**
 * Attack (docs/security/mysql.md, "Client addresses cannot be forged"): a host that reaches a
 * member's TCP port directly (not through a data plane) sends a PROXY header claiming an
 * address on the allow_list and logs in as linroot. The members accept PROXY headers over TCP
 * only from the data planes' addresses (the `proxy_sources` of the desired state), so the forged
 * header is refused; the same header from the data plane's own address is accepted (the control
 * case, which shows the refusal is about the sender). Real agent, real mariadbd (process runtime).
 */
import { connect } from 'node:net';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { desiredDb, testNet, type Driver } from '../integration/agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

const SLOT = 32;
const ID = 321;

describe('security: members accept PROXY headers only from data plane addresses', () => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const member = `${testNet('127.79', SLOT)}.1`;

  /** Connects to the member from `source`, sends a header claiming 127.0.0.2 and logs in. */
  const forged = (source: string) => {
    const sock = connect({ host: member, port: 3306, localAddress: source });
    sock.on('error', () => undefined);
    sock.write(`PROXY TCP4 127.0.0.2 ${member} 40000 3306\r\n`);
    return mysql
      .createConnection({ stream: sock, user: 'linroot', password: db.rootPassword!, connectTimeout: 3000 })
      .then(async (c) => {
        const [rows] = await c.query('SELECT USER() AS u');
        await c.end();
        return (rows as Array<{ u: string }>)[0]!.u;
      }, (e: Error) => e);
  };
  const rawAnswer = (source: string) => new Promise<string>((resolve) => {
    const s = connect({ host: member, port: 3306, localAddress: source });
    let got = '';
    s.on('data', (d) => (got += d.toString('latin1')));
    s.on('close', () => resolve(got));
    s.on('error', () => resolve(got));
    s.setTimeout(3000, () => s.destroy());
    s.write(`PROXY TCP4 127.0.0.2 ${member} 40001 3306\r\n`);
  });

  beforeAll(async () => {
    const engine = (await detectLocalCatalogue())[0];
    if (!engine) throw new Error('no local MariaDB server binary');
    fx = await createAgentFixture({ id: 'agent-proxy-sources', slot: SLOT, reconcileIntervalMs: 300 });
    driver = fx.driver;
    await fx.startAgent();
    // Plain transport, so that the only thing between the forger and a login is the header check.
    db = desiredDb({ id: ID, engineId: engine.id, version: engine.version, sslConnection: false, hostPrimary: `${fx.net}.1`, hostSecondary: `${fx.net}.2`, allowList: ['127.0.0.2/32'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(ID)?.status === 'active', 90_000, 'active');
    // The agent sets proxy_protocol_networks right after the start: wait for the control case.
    const end = Date.now() + 30_000;
    while ((await forged(driver.dataplane!.source)) instanceof Error && Date.now() < end) await new Promise((r) => setTimeout(r, 300));
  }, 150_000);

  afterAll(async () => {
    await fx?.close();
  });

  it('the data plane address may send a PROXY header: the login is linroot@<claimed client>', async () => {
    expect(await forged(driver.dataplane!.source)).toBe('linroot@127.0.0.2');
  });

  it('any other address is refused, the loopback default and an address of the same host alike', async () => {
    for (const source of ['127.0.0.1', `${testNet('127.76', SLOT)}.2`, db.hostPrimary!]) {
      const got = await forged(source);
      expect(got, `from ${source}`).toBeInstanceOf(Error);
      expect(await rawAnswer(source), `from ${source}`).toMatch(/Proxy header is not accepted from/);
    }
  });

  it('a data plane that leaves the desired state loses the right at once, without a restart', async () => {
    driver.setDatabases([{ ...db, proxySources: ['127.76.250.1'] }]);
    const end = Date.now() + 30_000;
    let got: string | Error = '';
    while (Date.now() < end) {
      got = await forged(driver.dataplane!.source);
      if (got instanceof Error) break;
      await new Promise((r) => setTimeout(r, 300));
    }
    expect(got).toBeInstanceOf(Error);
    expect(await rawAnswer(driver.dataplane!.source)).toMatch(/Proxy header is not accepted from/);
  });
});
