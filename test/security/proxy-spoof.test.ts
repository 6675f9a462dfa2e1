/**
 * Attack (docs/security/mysql.md, "Client addresses cannot be forged locally"): a local user
 * who is not the agent binds the database endpoint's address as its source (any process may
 * bind any 127.x address), connects to the node's TCP port and sends a PROXY header claiming an
 * address on the allow_list, then logs in as linroot. Before the fix the node trusted PROXY
 * headers from the endpoint addresses and the login succeeded as linroot@<allowed address>. Now
 * the node accepts them only over its Unix socket, whose directory other local users cannot
 * enter, and from the data planes' addresses (test/security/proxy-sources.test.ts): the forged
 * header is refused, the socket is out of reach, and real clients through the data plane's
 * endpoint are still seen with their own address. Run on both runtimes (the docker node
 * reaches the socket through a bind mount and runs as a non-root uid inside its container).
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, readdirSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import Docker from 'dockerode';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { detectDockerCatalogue } from '../../agent/runtime/docker-catalogue.js';
import { createDockerRuntime } from '../../agent/runtime/docker-runtime.js';
import { silentLogger } from '../../lib/logger.js';
import { createAgentFixture, type AgentFixture } from '../integration/agent/agent-fixture.js';
import { connectFrom, desiredDb, testNet, type Driver } from '../integration/agent/control-plane-driver.js';
import type { DesiredDatabase } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

const cases = [
  { runtime: 'process' as const, slot: 36, id: 42 },
  { runtime: 'docker' as const, slot: 37, id: 43 },
];

describe.each(cases)('security: PROXY headers cannot be forged by local users ($runtime runtime)', ({ runtime, slot, id }) => {
  let fx: AgentFixture;
  let driver: Driver;
  let db: DesiredDatabase;
  const net = testNet('127.78', slot);
  const nodeAddress = `${testNet('127.79', slot)}.1`;
  const nodeDir = () => join(fx.stateDir, 'runtime', 'nodes', readdirSync(join(fx.stateDir, 'runtime', 'nodes'))[0]!);
  const fromClient = (source: string, user = 'linroot', password = db.rootPassword!) =>
    connectFrom({ source, host: db.hostPrimary!, port: 3306, user, password, ca: driver.db(id)!.caCertPem });

  beforeAll(async () => {
    const engine = runtime === 'docker' ? (await detectDockerCatalogue())[0] : (await detectLocalCatalogue())[0];
    if (!engine) throw new Error(`no ${runtime} engine on this host`);
    fx = await createAgentFixture({ id: `agent-proxy-spoof-${runtime}`, slot, reconcileIntervalMs: 300, extra: () => ({ runtime }) });
    driver = fx.driver;
    await fx.startAgent();
    db = desiredDb({ id, engineId: engine.id, version: engine.version, hostPrimary: `${net}.1`, hostSecondary: `${net}.2`, allowList: ['127.0.0.2/32'] });
    driver.setDatabases([db]);
    await driver.waitFor(() => driver.db(id)?.status === 'active', 90_000, 'active');
  });

  afterAll(async () => {
    if (runtime === 'docker' && fx) {
      await fx.agent?.close();
      fx.agent = undefined;
      const rt = createDockerRuntime({ root: join(fx.stateDir, 'runtime'), logger: silentLogger() });
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
    }
    await fx?.close();
  });

  it('a forged PROXY header from the endpoint address to the node port is refused', async () => {
    const sock = connect({ host: nodeAddress, port: 3306, localAddress: db.hostPrimary! });
    sock.write(`PROXY TCP4 127.0.0.2 ${db.hostPrimary} 40000 3306\r\n`);
    const err = await mysql
      .createConnection({ stream: sock, user: 'linroot', password: db.rootPassword!, ssl: { ca: driver.db(id)!.caCertPem, rejectUnauthorized: false }, connectTimeout: 3000 })
      .then((c) => c.query('SELECT CURRENT_USER() AS u').then(([r]) => c.end().then(() => `logged in as ${(r as any[])[0].u}`)), (e: Error) => e);
    // The TLS client sees the server's refusal as a failed handshake; the raw answer says why.
    expect(err).toBeInstanceOf(Error);
    const raw = await new Promise<string>((resolve) => {
      const s = connect({ host: nodeAddress, port: 3306, localAddress: db.hostPrimary! });
      let got = '';
      s.on('data', (d) => (got += d.toString('latin1')));
      s.on('close', () => resolve(got));
      s.on('error', () => resolve(got));
      s.setTimeout(3000, () => s.destroy());
      s.write(`PROXY TCP4 127.0.0.2 ${db.hostPrimary} 40001 3306\r\n`);
    });
    expect(raw).toMatch(/Proxy header is not accepted from/);
  });

  it("the node's Unix socket, which does accept PROXY headers, is out of other local users' reach", () => {
    const socket = join(nodeDir(), 'run', 'mysqld.sock');
    const probe = spawnSync(process.execPath, ['-e', `require('net').connect(${JSON.stringify(socket)}).on('connect', () => { console.log('CONNECTED'); process.exit(0); }).on('error', (e) => { console.log(e.code); process.exit(0); })`], {
      uid: 65534, gid: 65534, encoding: 'utf8', timeout: 10_000,
    });
    expect(probe.stdout.trim()).toMatch(/^(EACCES|ENOENT)$/);
  });

  it('real clients through the data plane endpoint are seen with their own address', async () => {
    const c = await fromClient('127.0.0.2');
    const [rows] = await c.query('SELECT USER() AS u, CURRENT_USER() AS cu');
    expect((rows as any[])[0]).toEqual({ u: 'linroot@127.0.0.2', cu: 'linroot@127.0.0.2' });
    // An account for one client address admits that client only.
    await c.query("CREATE USER app@'127.0.0.2' IDENTIFIED BY 'App.Pass_01'");
    await c.end();
    const app = await fromClient('127.0.0.2', 'app', 'App.Pass_01');
    await app.end();
    // Outside the allow_list another address is reset by the data plane before the node sees it,
    // which says nothing about the account: let 127.0.0.3 through, see the node take it as itself
    // (linroot@127.0.0.3), and only then see app refused there by the node.
    db = { ...db, allowList: ['127.0.0.2/32', '127.0.0.3/32'], generation: 2 };
    driver.setDatabases([db]);
    let other: Awaited<ReturnType<typeof fromClient>> | undefined;
    for (const end = Date.now() + 30_000; !other && Date.now() < end; await new Promise((r) => setTimeout(r, 200))) {
      other = await fromClient('127.0.0.3').catch(() => undefined);
    }
    if (!other) throw new Error('127.0.0.3 not admitted within 30 s of joining the allow_list');
    const [seen] = await other.query('SELECT CURRENT_USER() AS cu');
    expect((seen as any[])[0].cu).toBe('linroot@127.0.0.3');
    await other.end();
    const refused = await fromClient('127.0.0.3', 'app', 'App.Pass_01').then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(refused)).toMatch(/Access denied for user 'app'@'127\.0\.0\.3'/);
  });

  it('a plain (non-TLS) client is refused through the data plane endpoint, as require_secure_transport says', async () => {
    const err = await connectFrom({ source: '127.0.0.2', host: db.hostPrimary!, port: 3306, user: 'linroot', password: db.rootPassword! })
      .then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(err)).toMatch(/insecure transport/i);
  });

  it('root@localhost has its password from the first start; no other install-time account is left', async () => {
    expect(readFileSync(join(nodeDir(), 'my.cnf'), 'utf8')).toMatch(/^init_file=.*init\.sql$/m);
    const socketPath = join(nodeDir(), 'run', 'mysqld.sock');
    const empty = await mysql.createConnection({ socketPath, user: 'root', password: '' }).then((x) => x.end().then(() => null), (e: Error) => e);
    expect(String(empty)).toMatch(/Access denied/);
    const state = JSON.parse(readFileSync(join(fx.stateDir, 'databases', String(id), 'state.json'), 'utf8')) as { adminPassword: string };
    const r = await mysql.createConnection({ socketPath, user: 'root', password: state.adminPassword });
    const [rows] = await r.query("SELECT User, Host FROM mysql.global_priv WHERE User IN ('root', 'mysql', '') ORDER BY User, Host");
    await r.end();
    expect(rows).toEqual([{ User: 'root', Host: 'localhost' }]);
  });

  it('mariadbd runs as a non-root uid', async () => {
    const node = (await fx.agent!.runtime.list({}))[0]!;
    let pid = Number(node.ref);
    if (runtime === 'docker') pid = (await new Docker({ socketPath: '/var/run/docker.sock' }).getContainer(node.ref!).inspect()).State.Pid;
    const status = readFileSync(`/proc/${pid}/status`, 'utf8');
    expect(readFileSync(`/proc/${pid}/comm`, 'utf8').trim()).toMatch(/mariadbd|mysqld/);
    const uids = /^Uid:\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)/m.exec(status)!.slice(1).map(Number);
    for (const u of uids) expect(u).not.toBe(0);
  });
});
