/**
 * The seven low findings of the second security review, one attack each, against real code (a real data
 * plane, a real MariaDB, the real CLI, the real openssl, real control planes and both real
 * stores). Each test failed before its fix (docs/security/*.md name them).
 */
import { chmodSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { X509Certificate } from 'node:crypto';
import mysql from 'mysql2/promise';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createProxyEngine, type ProxyEngine } from '../../dataplane/engine.js';
import { createLogger, silentLogger } from '../../lib/logger.js';
import { ManualClock } from '../../lib/clock.js';
import { generateKeyAndCsr } from '../../lib/pki.js';
import { FleetCa } from '../../control-plane/domain/fleet/ca.js';
import { AuthService } from '../../control-plane/domain/auth/auth-service.js';
import { UserService } from '../../control-plane/domain/auth/user-service.js';
import { EventService } from '../../control-plane/domain/events/event-service.js';
import { openSqliteStore } from '../../control-plane/store/sqlite/store.js';
import { openPostgresStore } from '../../control-plane/store/postgres/store.js';
import type { Store } from '../../control-plane/domain/store.js';
import { detectLocalCatalogue } from '../../agent/catalogue.js';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { syncAdminAccounts } from '../../agent/mysql/accounts.js';
import { loopback, startHttpBackend, type HttpBackend } from '../helpers/backends.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { runFulcrum } from '../helpers/lab.js';
import { startPgCluster, type PgCluster } from '../helpers/postgres.js';
import { config, freePort, node, nodebalancer, snapshot } from '../integration/dataplane/snapshot.js';

const dirs: string[] = [];
const tmp = (prefix: string) => {
  const d = mkdtempSync(join(tmpdir(), prefix));
  dirs.push(d);
  return d;
};
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** Sends `data` and collects everything until the proxy closes (or 10 s pass). */
function exchange(ip: string, port: number, data: string): Promise<string> {
  return new Promise((resolve) => {
    const s = connect({ host: ip, port });
    let got = '';
    const timer = setTimeout(() => s.destroy(), 10_000);
    s.on('data', (d: Buffer) => (got += d.toString('latin1')));
    s.on('error', () => undefined);
    s.on('close', () => {
      clearTimeout(timer);
      resolve(got);
    });
    s.write(data);
  });
}

describe('request heads a backend could read differently are refused (RFC 9112 §6.1, §6.3)', () => {
  let engine: ProxyEngine;
  let backend: HttpBackend;
  const ip = loopback();
  let port = 0;
  beforeAll(async () => {
    backend = await startHttpBackend('b');
    port = await freePort(ip);
    engine = createProxyEngine({ logger: silentLogger() });
    await engine.apply(snapshot(1, [nodebalancer(ip, [config(port, [node(backend.address)], { protocol: 'http', checkPassive: false })])]));
  });
  afterAll(async () => {
    await engine?.close();
    await backend?.close();
  });

  it('answers 400 and closes, forwarding none of them; one chunked HTTP/1.1 body still passes', async () => {
    const smuggles: Record<string, string> = {
      'Transfer-Encoding in HTTP/1.0': 'POST / HTTP/1.0\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      'a coding list ending in chunked': 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n',
      'chunked twice in one line': 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n',
      'Transfer-Encoding twice': 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n',
      'an equal Content-Length twice': 'POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\nhello',
    };
    for (const [why, req] of Object.entries(smuggles)) {
      const out = await exchange(ip, port, req);
      expect(out, why).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
    }
    expect(backend.hits).toBe(0);
    const ok = await exchange(ip, port, 'POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n0\r\n\r\n');
    expect(ok).toMatch(/^HTTP\/1\.1 200 OK\r\n[\s\S]*\r\n\r\n1\r\nb\r\n0\r\n\r\n$/);
    expect(backend.hits).toBe(1);
  });
});

describe('a failing statement holding a password never reaches the agent log', () => {
  const root = tmp('fulcrum-low-log-');
  const rt = createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  let socketPath = '';
  beforeAll(async () => {
    const [engine] = await detectLocalCatalogue();
    if (!engine) throw new Error('no local mariadbd: the process runtime needs mariadb-server installed');
    await rt.ensure({
      name: 'fulcrum-lowlog-n1', labels: {}, dataDir: join(root, 'data'), files: {}, host: '127.0.0.1', memoryMb: 256, cpus: 1,
      engine, config: '[mysqld]\ninnodb_buffer_pool_size=32M\n', port: await freePort('127.0.0.1'),
    });
    socketPath = (await rt.connection('fulcrum-lowlog-n1')).socketPath!;
    const c = await mysql.createConnection({ socketPath, user: 'root', password: '' });
    // An account that can read mysql.user but not create users: syncAdminAccounts' CREATE USER fails.
    await c.query("CREATE USER 'weak'@'localhost' IDENTIFIED BY 'Weak.Pass_1'");
    await c.query("GRANT SELECT ON mysql.* TO 'weak'@'localhost'");
    await c.end();
  }, 120_000);
  afterAll(async () => {
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
  }, 60_000);

  it('neither the statement (mysql2 err.sql) nor the part a syntax error quotes is logged', async () => {
    let out = '';
    const sink = new Writable({ write: (chunk, _enc, done) => void ((out += chunk.toString()), done()) });
    const log = createLogger('agent', { destination: sink }).child({ component: 'database' });
    const password = 'Sup3r.Secret_linroot_pw';
    const c = await mysql.createConnection({ socketPath, user: 'weak', password: 'Weak.Pass_1' });
    try {
      // The agent's own code, as its controller runs it and logs the failure ("action failed").
      const denied = await syncAdminAccounts(c, ['10.0.0.0/8'], password).then(() => null, (e: Error) => e);
      expect(String((denied as { sql?: string } | null)?.sql)).toContain(password);
      log.error({ err: denied, action: 'sync-accounts' }, 'action failed');
      // A statement the server cannot parse: its message quotes the text from the error on.
      const syntax = await c.query('ALTER USER IDENTIFIED BY ?', [password]).then(() => null, (e: Error) => e);
      expect(String(syntax?.message)).toContain(password);
      log.warn({ err: syntax }, 'reset failed');
      log.info({ err: syntax?.message }, 'cancelled');
    } finally {
      await c.end();
    }
    expect(out.split('\n').filter(Boolean)).toHaveLength(3);
    expect(out).toContain('CREATE USER privilege');
    expect(out).toContain('ER_PARSE_ERROR');
    expect(out).not.toContain(password);
    expect(out).not.toContain('IDENTIFIED BY');
  });
});

describe('a config file holding a URL with a password must be private', () => {
  it('fulcrum control-plane refuses a store URL with userinfo in a file others may read, naming the key', async () => {
    const dir = tmp('fulcrum-low-conf-');
    const conf = join(dir, 'control-plane.conf');
    writeFileSync(conf, `state = ${join(dir, 'state')}\nstore = postgres://fulcrum:hunter2-store-pw@127.0.0.1:1/fulcrum\napi-port = 0\ngrpc-port = 0\nbootstrap-port = 0\n`);
    chmodSync(conf, 0o644);
    const p = runFulcrum(['control-plane', '--config', conf]);
    let err = '';
    p.stderr!.on('data', (d) => (err += d));
    const code = await new Promise<number>((resolve) => p.on('exit', (c) => resolve(c ?? -1)));
    expect(err).toContain(`--config ${conf}: holds "store", a URL with a user or password in it, but group or others may read it (chmod 600 ${conf})`);
    expect(code).toBe(2);
    expect(err).not.toContain('hunter2-store-pw');
  }, 60_000);
});

describe('the CA key never touches disk outside its own file', () => {
  it('issuing (and making the CA, a server pair and a host key) hands openssl no key file', () => {
    // An `openssl` first on PATH that records every file holding a private key in the folder it
    // is run in (where the control plane put the files it passes), then runs the real one.
    const dir = tmp('fulcrum-low-pki-');
    const bin = join(dir, 'bin');
    const seen = join(dir, 'key-files-seen');
    const calls = join(dir, 'calls');
    mkdirSync(bin);
    writeFileSync(seen, '');
    writeFileSync(calls, '');
    writeFileSync(join(bin, 'openssl'), [
      '#!/bin/sh',
      `echo "$1" >> ${calls}`,
      `for f in ./* ./.*; do [ -f "$f" ] && grep -q "PRIVATE KEY" "$f" && echo "$1 $f" >> ${seen}; done`,
      'exec /usr/bin/openssl "$@"',
      '',
    ].join('\n'), { mode: 0o755 });
    const path = process.env.PATH;
    process.env.PATH = `${bin}:${path}`;
    try {
      const state = join(dir, 'state');
      const ca = FleetCa.open(state);
      const { csrPem } = generateKeyAndCsr();
      const issued = ca.issue(csrPem, { role: 'dataplane', id: 'dp-low', region: 'us-east' }, 86_400_000);
      ca.serverPair();
      expect(new X509Certificate(issued.certPem).checkIssued(new X509Certificate(ca.caPem))).toBe(true);
      expect(new X509Certificate(issued.certPem).verify(new X509Certificate(ca.caPem).publicKey)).toBe(true);
    } finally {
      process.env.PATH = path;
    }
    // The shim saw every call (CA, host CSR, CSR check, issue, server CSR, its check and issue)...
    expect(readFileSync(calls, 'utf8').split('\n').filter(Boolean)).toEqual(['genpkey', 'req', 'req', 'req', 'x509', 'genpkey', 'req', 'req', 'x509']);
    // ...and none of them found a private key among the files it was given.
    expect(readFileSync(seen, 'utf8')).toBe('');
  });
});

describe('udp_check_port follows the backend address rules', () => {
  let api: ApiHarness;
  let token = '';
  let grpcPort = 0;
  beforeAll(async () => {
    // The lab's setting: loopback backends allowed, the control plane's own ports still refused.
    api = await startApi({ backendNetworks: ['127.0.0.0/8', '10.0.0.0/8'] });
    token = await api.userToken('udp-tenant', { restricted: true, grants: { global: { add_nodebalancers: true } } });
    grpcPort = Number(api.cp.grpcAddress.split(':')[1]);
  });
  afterAll(() => api?.close());

  it("refuses a udp config whose health checks would reach the control plane's gRPC port, on every write", async () => {
    const udp = (checkPort: number, nodes: unknown[] = []) => ({ port: 5353, protocol: 'udp', check: 'connection', udp_check_port: checkPort, nodes });
    const lo = { address: '127.0.0.1:9000', label: 'lo-node' };
    const refused = async (method: string, path: string, body: unknown, field: string) => {
      const before = api.snapshot();
      const r = await api.req(method, path, { token, body });
      expect(r.status, `${method} ${path}`).toBe(400);
      expect(r.body.errors, `${method} ${path}`).toEqual([{ field, reason: expect.stringMatching(/not allowed/) }]);
      expect(api.snapshot()).toBe(before);
    };
    await refused('POST', '/v4/nodebalancers', { region: 'us-east', configs: [udp(grpcPort, [lo])] }, 'configs[0].udp_check_port');

    const nb = await api.req('POST', '/v4/nodebalancers', { token, body: { region: 'us-east', configs: [udp(8053, [lo])] } });
    expect(nb.status).toBe(200);
    const cfg = (await api.req('GET', `/v4/nodebalancers/${nb.body.id}/configs`, { token })).body.data[0];
    const base = `/v4/nodebalancers/${nb.body.id}/configs/${cfg.id}`;
    await refused('PUT', base, { udp_check_port: grpcPort }, 'udp_check_port');
    await refused('POST', `${base}/rebuild`, { ...udp(grpcPort), nodes: [lo] }, 'udp_check_port');

    // A config without nodes may name the port; a node whose checks would go there may not join it.
    const empty = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs`, { token, body: { ...udp(grpcPort), port: 5354, nodes: undefined } });
    expect(empty.status).toBe(200);
    await refused('POST', `/v4/nodebalancers/${nb.body.id}/configs/${empty.body.id}/nodes`, lo, 'address');
    // An address outside loopback is checked at the same port, which is no listener of ours there.
    const other = await api.req('POST', `/v4/nodebalancers/${nb.body.id}/configs/${empty.body.id}/nodes`, { token, body: { address: '10.1.2.3:9000', label: 'ten-node' } });
    expect(other.status).toBe(200);
  });
});

/** Both real stores: a SQLite file and a database of a private PostgreSQL cluster. */
describe.each(['sqlite', 'postgres'] as const)('account state in the %s store', (kind) => {
  let cluster: PgCluster | undefined;
  let store: Store;
  beforeAll(async () => {
    const dir = tmp('fulcrum-low-store-');
    if (kind === 'sqlite') store = openSqliteStore(join(dir, 'cp.sqlite'), { kekFile: join(dir, 'keys', 'kek') });
    else {
      cluster = await startPgCluster();
      store = await openPostgresStore(await cluster.newDatabase(), { kekFile: join(dir, 'keys', 'kek') });
    }
  }, 180_000);
  afterAll(async () => {
    await store?.close();
    await cluster?.stop();
  }, 60_000);

  it("a creator grant does not undo an administrator's revoke made while the create was under way", async () => {
    const clock = new ManualClock();
    const auth = new AuthService(store.users, store.tokens, clock);
    const users = new UserService(store.users, auth);
    const admin = await auth.authenticate(`Bearer ${(await auth.issueToken((await auth.ensureAdmin()).id, { label: 'a', scopes: '*', expiry: null })).secret}`);
    const tenant = await auth.createUser('grant-tenant', true, { global: { add_nodebalancers: true }, nodebalancer: { 7: 'read_write' }, database: {} });
    const secret = (await auth.issueToken(tenant.id, { label: 't', scopes: '*', expiry: null })).secret;
    // The tenant's create request is authenticated (its grants read, NodeBalancer 7 among them)...
    const inFlight = await auth.authenticate(`Bearer ${secret}`);
    // ...the administrator revokes NodeBalancer 7 meanwhile...
    await users.updateGrants(admin, 'grant-tenant', { nodebalancer: [{ id: 7, permissions: null }] });
    // ...and the create ends with the creator grant on the new NodeBalancer 8.
    await auth.grantCreator(inFlight, 'nodebalancer', 8);
    expect((await store.users.get(tenant.id))!.grants.nodebalancer).toEqual({ 8: 'read_write' });
    // The other order: an administrator's edit keeps a creator grant written after the edit's read.
    await Promise.all([
      users.updateGrants(admin, 'grant-tenant', { nodebalancer: [{ id: 9, permissions: 'read_only' }] }),
      auth.grantCreator(await auth.authenticate(`Bearer ${secret}`), 'nodebalancer', 10),
    ]);
    expect((await store.users.get(tenant.id))!.grants.nodebalancer).toEqual({ 8: 'read_write', 9: 'read_only', 10: 'read_write' });
  });

  it('events are pruned by age (90 days, injected clock) and by count, and a page reads only its rows', async () => {
    const clock = new ManualClock(Date.UTC(2025, 0, 1));
    const events = new EventService(store.events, clock, { retention: { maxEvents: 30, pruneEveryEvents: 1 } });
    const ref = (id: number) => ({ id, type: 'nodebalancer', label: `nb${id}`, url: `/v4/nodebalancers/${id}` });
    for (let i = 0; i < 3; i++) await events.record('nodebalancer_create', ref(100 + i));
    clock.advance(89 * 86_400_000);
    await events.record('nodebalancer_update', ref(100));
    expect(await store.events.list()).toHaveLength(4);
    clock.advance(2 * 86_400_000);
    await events.record('nodebalancer_update', ref(101));
    // The three from day 0 are past 90 days; the one from day 89 and the new one stay.
    expect((await store.events.list()).map((e) => e.action)).toEqual(['nodebalancer_update', 'nodebalancer_update']);
    for (let i = 0; i < 40; i++) await events.record('nodebalancer_config_update', ref(i % 2 === 0 ? 200 : 201));
    const all = await store.events.list();
    expect(all).toHaveLength(30);
    expect(all.every((e) => e.action === 'nodebalancer_config_update')).toBe(true);

    const page = await events.page({}, 25, 25);
    expect(page.total).toBe(30);
    expect(page.events.map((e) => e.id)).toEqual(all.slice(25).map((e) => e.id));
    const mine = await events.page({ entities: { nodebalancer: [200], database: [] } }, 0, 25);
    expect(mine.total).toBe(15);
    expect(mine.events.every((e) => e.entity!.id === 200)).toBe(true);
  });
});

describe('GET /account/events reads only the page asked for', () => {
  let api: ApiHarness;
  beforeAll(async () => {
    api = await startApi();
  });
  afterAll(() => api?.close());

  it('a page of the newest events is served while an old row far from it cannot even be read', async () => {
    const db = api.cp.context.db!;
    const insert = db.prepare(`INSERT INTO events (created, action, username, entity_id, entity_type, entity_label, entity_url, secondary_entity,
      status, percent_complete, duration, message, seen, read) VALUES (?, 'nodebalancer_update', 'admin', 1, 'nodebalancer', 'nb1', '/v4/nodebalancers/1', ?, 'notification', NULL, NULL, NULL, 0, 0)`);
    const now = Date.now();
    // The oldest row is unreadable (its secondary entity is not JSON): reading every event, as
    // the list once did for any page, fails on it.
    insert.run(now - 1000, '{not json');
    for (let i = 0; i < 60; i++) insert.run(now, null);
    const r = await api.req('GET', '/v4/account/events?page_size=25');
    expect(r.status).toBe(200);
    expect(r.body).toMatchObject({ page: 1, pages: 3, results: 61 });
    expect(r.body.data).toHaveLength(25);
    const ids = r.body.data.map((e: { id: number }) => e.id);
    expect(ids).toEqual([...ids].sort((a: number, b: number) => b - a));
  });
});
