// integration-lane: concurrent (startPgCluster: its own folder and a free port, retried; SQLite in temp folders).
import { UniqueViolation } from '../../../control-plane/domain/ports.js';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Store } from '../../../control-plane/domain/store.js';
import { openSqliteStore } from '../../../control-plane/store/sqlite/store.js';
import { openPostgresStore } from '../../../control-plane/store/postgres/store.js';
import { migrations } from '../../../control-plane/store/common/migrations.js';
import type { DatabaseRecord } from '../../../control-plane/domain/databases/model.js';
import type { NewConfig } from '../../../control-plane/domain/nodebalancers/model.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

/**
 * One repository contract, run against both adapters (docs/architecture.md, "The store"): the
 * SQLite file of the lab and a real PostgreSQL 15 cluster started here. Each test gets a fresh
 * store; `raw` reads a column as stored, to see that secrets are sealed on both.
 */
interface Adapter {
  open(): Promise<{ store: Store; raw(sql: string): Promise<unknown> }>;
}

const dirs: string[] = [];
const tmp = () => {
  const d = mkdtempSync(join(tmpdir(), 'hapg-store-'));
  dirs.push(d);
  return d;
};
let cluster: PgCluster;
const stores: Store[] = [];

const adapters: Record<string, Adapter> = {
  sqlite: {
    async open() {
      const dir = tmp();
      const store = openSqliteStore(join(dir, 'cp.sqlite'), { kekFile: join(dir, 'keys', 'kek') });
      stores.push(store);
      return { store, raw: async (sql) => store.db.prepare(sql).pluck().get() };
    },
  },
  postgres: {
    async open() {
      const store = await openPostgresStore(await cluster.newDatabase(), { kekFile: join(tmp(), 'keys', 'kek') });
      stores.push(store);
      return { store, raw: async (sql) => Object.values((await store.executor.one(sql)) ?? {})[0] };
    },
  },
};

beforeAll(async () => {
  cluster = await startPgCluster();
}, 180_000);
afterAll(async () => {
  for (const s of stores) await s.close().catch(() => undefined);
  await cluster?.stop();
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
}, 60_000);

const grants = { global: {}, nodebalancer: {}, database: {} };
const nb = (label: string) => ({ label, region: 'us-east', ipv4: '0.0.0.0', ipv6: null, clientConnThrottle: 0, clientUdpSessThrottle: 0, type: 'common' as const, tags: ['t'], created: 1000, updated: 1000 });
const config = (port: number, sslKey: string | null = null): NewConfig => ({
  port, protocol: 'tcp', algorithm: 'roundrobin', stickiness: 'none', check: 'none', checkInterval: 5, checkTimeout: 3, checkAttempts: 2,
  checkPath: '', checkBody: '', checkPassive: true, proxyProtocol: 'none', cipherSuite: 'recommended', sslCert: sslKey ? 'CERT' : null, sslKey,
  sslCommonname: '', sslFingerprint: '', udpCheckPort: 80, udpSessionTimeout: 16,
} as NewConfig);
const database = (label: string): Omit<DatabaseRecord, 'id'> => ({
  label, region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/8.0', version: '8.0', image: '', binary: '', clusterSize: 1, replicationType: 'none',
  encrypted: false, sslConnection: true, allowList: ['10.0.0.0/8'], updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: null, week_of_month: null },
  status: 'provisioning', hostPrimary: '', hostSecondary: null, port: 3306, provisioned: false, members: {}, caCert: null, usedDiskMb: null, patchPending: false,
  engineConfig: {}, rootPassword: 'Root.Secret_0001', nextPassword: null, generation: 1, convergedGeneration: 0, runState: 'running', agentId: null, term: 1,
  primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null, lastError: null, created: 1000, updated: 1000,
} as Omit<DatabaseRecord, 'id'>);

describe.each(Object.keys(adapters))('repository contract on %s', (name) => {
  const open = () => adapters[name]!.open();

  it('applies every migration and reports them', async () => {
    const { store } = await open();
    expect(await store.migrations()).toEqual(migrations.map((m) => m.id).sort());
  });

  it('users and tokens: unique usernames, cascade on delete, token ids never reused', async () => {
    const { store } = await open();
    const a = await store.users.create({ username: 'alice', email: 'a@x', restricted: true, grants });
    await expect(store.users.create({ username: 'alice', email: 'b@x', restricted: false, grants })).rejects.toThrow(UniqueViolation);
    const bob = await store.users.create({ username: 'bob', email: 'b@x', restricted: true, grants });
    await expect(store.users.update(bob.id, { username: 'alice' })).rejects.toMatchObject({ name: 'UniqueViolation', field: 'username' });
    await store.users.delete(bob.id);
    expect(await store.users.byUsername('alice')).toMatchObject({ id: a.id, restricted: true });
    await store.users.update(a.id, { email: 'new@x', restricted: false });
    expect(await store.users.get(a.id)).toMatchObject({ email: 'new@x', restricted: false });
    const t1 = await store.tokens.create({ userId: a.id, label: 'l', scopes: '*', tokenHash: 'h1', tokenPrefix: 'p', created: 1, expiry: null });
    const t2 = await store.tokens.create({ userId: a.id, label: 'l', scopes: '*', tokenHash: 'h2', tokenPrefix: 'p', created: 1, expiry: 5 });
    await store.tokens.delete(t2.id);
    const t3 = await store.tokens.create({ userId: a.id, label: 'l', scopes: '*', tokenHash: 'h3', tokenPrefix: 'p', created: 1, expiry: null });
    expect(t3.id).toBeGreaterThan(t2.id);
    expect((await store.tokens.byHash('h1'))?.id).toBe(t1.id);
    await store.users.delete(a.id);
    expect(await store.tokens.listByUser(a.id)).toEqual([]);
    expect(await store.users.count()).toBe(0);
  });

  it('oauth: linode-cli\'s client shipped, clients and pending codes capped, a code used once, a client\'s tokens go with it', async () => {
    const { store } = await open();
    expect(await store.oauth.client('5823b4627e45411d18e9')).toMatchObject({ label: 'linode-cli', public: true, implicit: true, redirectUri: 'http://localhost' });
    const client = (id: string) => ({ id, label: id, public: false, redirectUri: 'https://x.test/cb', secretHash: 'h', implicit: false, created: 5 });
    expect(await store.oauth.addClient(client('aaaaaaaaaaaaaaaaaaaa'), 3)).toBe(true);
    expect(await store.oauth.addClient(client('bbbbbbbbbbbbbbbbbbbb'), 3)).toBe(true);
    expect(await store.oauth.addClient(client('cccccccccccccccccccc'), 3)).toBe(false);
    await store.oauth.updateClient('aaaaaaaaaaaaaaaaaaaa', { label: 'renamed', redirectUri: 'https://y.test/cb' });
    expect(await store.oauth.client('aaaaaaaaaaaaaaaaaaaa')).toMatchObject({ label: 'renamed', redirectUri: 'https://y.test/cb', secretHash: 'h', public: false });
    const u = await store.users.create({ username: 'erin', email: 'e@x', restricted: false, grants });
    const code = (h: string, expires: number) => ({ codeHash: h, clientId: 'aaaaaaaaaaaaaaaaaaaa', userId: u.id, redirectUri: 'https://y.test/cb?a=1', scopes: '*', challenge: null, expires, tokenExpiry: 9, usedAt: null, tokenId: null });
    expect(await store.oauth.addCode(code('c1', 100), 50, { total: 2, perUser: 5 })).toBe(true);
    expect(await store.oauth.addCode(code('c2', 60), 50, { total: 2, perUser: 5 })).toBe(true);
    expect(await store.oauth.addCode(code('c3', 100), 50, { total: 2, perUser: 5 })).toBe(false);
    // c2 expired by 70: pruned, which makes room.
    expect(await store.oauth.addCode(code('c3', 100), 70, { total: 2, perUser: 5 })).toBe(true);
    // One user's share: full at 2 for this user while the total would allow more.
    expect(await store.oauth.addCode(code('c4', 100), 70, { total: 9, perUser: 2 })).toBe(false);
    expect(await store.oauth.useCode('c2', 71)).toBeUndefined();
    expect(await store.oauth.useCode('c1', 71)).toMatchObject({ usedAt: null, tokenExpiry: 9, redirectUri: 'https://y.test/cb?a=1' });
    expect(await store.oauth.useCode('c1', 72)).toMatchObject({ usedAt: 71, tokenId: null });
    const t = await store.tokens.create({ userId: u.id, label: 'l', scopes: '*', tokenHash: 'oh1', tokenPrefix: 'p', created: 1, expiry: 10 });
    const t2 = await store.tokens.create({ userId: u.id, label: 'l', scopes: '*', tokenHash: 'oh2', tokenPrefix: 'p', created: 1, expiry: 1000 });
    await store.oauth.linkToken('c1', 'aaaaaaaaaaaaaaaaaaaa', t.id);
    await store.oauth.linkToken(null, 'aaaaaaaaaaaaaaaaaaaa', t2.id);
    expect(await store.oauth.useCode('c1', 73)).toMatchObject({ tokenId: t.id });
    expect(await store.oauth.tokenClient(t.id)).toBe('aaaaaaaaaaaaaaaaaaaa');
    // Expired login tokens are dropped when counting.
    expect(await store.oauth.liveTokens(u.id, 20)).toBe(1);
    expect(await store.tokens.get(t.id)).toBeUndefined();
    await store.oauth.deleteClient('aaaaaaaaaaaaaaaaaaaa');
    expect(await store.tokens.get(t2.id)).toBeUndefined();
    expect(await store.oauth.useCode('c3', 80)).toBeUndefined();
    expect((await store.oauth.clients()).map((c) => c.id)).toEqual(['5823b4627e45411d18e9', 'bbbbbbbbbbbbbbbbbbbb']);
  });

  it('profile: timezone and preferences per user, preferences replaced whole, gone with the user', async () => {
    const { store } = await open();
    const a = await store.users.create({ username: 'carol', email: 'c@x', restricted: false, grants });
    expect(a.timezone).toBe('UTC');
    expect(await store.users.preferences(a.id)).toBe('{}');
    const b = await store.users.create({ username: 'dave', email: 'd@x', restricted: true, grants });
    await store.users.setPreferences(a.id, JSON.stringify({ theme: 'dark', sortKeys: { nb: 'label' } }));
    await store.users.setPreferences(a.id, JSON.stringify({ theme: 'light' }));
    await store.users.update(a.id, { timezone: 'Europe/Berlin' });
    expect(JSON.parse((await store.users.preferences(a.id))!)).toEqual({ theme: 'light' });
    expect(await store.users.preferences(b.id)).toBe('{}');
    expect(await store.users.get(a.id)).toMatchObject({ timezone: 'Europe/Berlin' });
    expect((await store.users.list()).map((u) => u.timezone)).toEqual(['Europe/Berlin', 'UTC']);
    await store.users.delete(a.id);
    expect(await store.users.preferences(a.id)).toBeUndefined();
  });

  it('events: newest first, updates, seen up to an id', async () => {
    const { store } = await open();
    const e1 = await store.events.create({ created: 1000, action: 'a', username: 'u', entity: { id: 1, type: 'nodebalancer', label: 'x', url: '/x' }, secondaryEntity: null, status: 'notification', percentComplete: null, duration: null, message: null, seen: false, read: false });
    const e2 = await store.events.create({ ...e1, action: 'b', entity: null });
    await store.events.update(e1.id, { status: 'finished', percentComplete: 100, duration: 2.5, read: true });
    await store.events.markSeenUpTo(e1.id);
    const list = await store.events.list();
    expect(list.map((e) => e.id)).toEqual([e2.id, e1.id]);
    expect(list[1]).toMatchObject({ status: 'finished', percentComplete: 100, duration: 2.5, read: true, seen: true, entity: { id: 1, type: 'nodebalancer' } });
    expect(list[0]).toMatchObject({ seen: false, entity: null });
  });

  it('addresses: lowest free first, never .0/.1/.255, released for reuse, undefined when full', async () => {
    const { store } = await open();
    const got: string[] = [];
    for (let i = 0; i < 4; i++) got.push((await store.addresses.allocate('10.9.0.252/30', 'nodebalancer', i))!);
    expect(got.slice(0, 1)).toEqual(['10.9.0.254']);
    expect(got[1]).toBeUndefined();
    const pool = '10.8.0.0/23';
    expect(await store.addresses.allocate(pool, 'nodebalancer', 1)).toBe('10.8.0.2');
    expect(await store.addresses.allocate(pool, 'database', 2)).toBe('10.8.0.3');
    await store.addresses.release('nodebalancer', 1);
    expect(await store.addresses.allocate(pool, 'database', 2)).toBe('10.8.0.2');
    expect(await store.addresses.owned('database', 2)).toEqual(['10.8.0.2', '10.8.0.3']);
  });

  it('key-value and data-plane status', async () => {
    const { store } = await open();
    expect(await store.kv.get('k')).toBeUndefined();
    await store.kv.set('k', '1');
    await store.kv.set('k', '2');
    expect(await store.kv.get('k')).toBe('2');
    const s = { id: 'dp', region: 'r', connected: true, replica: 'cp-a', versionApplied: 3, lastError: null, lastErrorAt: null, lastSeen: 1_700_000_000_000 };
    await store.dataplanes.upsert(s);
    await store.dataplanes.upsert({ ...s, connected: false });
    expect(await store.dataplanes.list()).toEqual([{ ...s, connected: false }]);
  });

  it('host streams: a replica releases only the hosts it holds; a sweep clears the hosts of replicas without a recent heartbeat', async () => {
    const { store } = await open();
    const dp = (id: string, replica: string) => ({ id, region: 'r', connected: true, replica, versionApplied: 1, lastError: null, lastErrorAt: null, lastSeen: 100 });
    const agent = (id: string, replica: string) => ({ id, region: 'r', runtime: 'process', membersAcrossHosts: false, connected: true, replica, lastSeen: 100, appliedVersion: 1, engines: [] });
    const connected = async () => [
      ...(await store.dataplanes.list()).filter((d) => d.connected).map((d) => `dp:${d.id}@${d.replica}`),
      ...(await store.databases.agents()).filter((a) => a.connected).map((a) => `agent:${a.id}@${a.replica}`),
    ].sort();
    for (const [id, replica] of [['d1', 'cp-a'], ['d2', 'cp-a'], ['d3', 'cp-b'], ['d4', 'cp-c'], ['d5', '']]) await store.dataplanes.upsert(dp(id!, replica!));
    for (const [id, replica] of [['a1', 'cp-a'], ['a2', 'cp-b'], ['a3', 'cp-c'], ['a4', '']]) await store.databases.upsertAgent(agent(id!, replica!));

    // One host: only while the named replica holds it, and lastSeen is the given time.
    await store.dataplanes.release('cp-b', 'd1', 200);
    await store.dataplanes.release('cp-a', 'd1', 200);
    expect(await store.dataplanes.get('d1')).toMatchObject({ connected: false, replica: 'cp-a', lastSeen: 200 });
    await store.databases.releaseAgents('cp-b', 'a1', 200);
    expect(await store.databases.agent('a1')).toMatchObject({ connected: true, lastSeen: 100 });
    // Every host of one replica, lastSeen kept when no time is given.
    await store.dataplanes.release('cp-a');
    expect(await store.dataplanes.get('d2')).toMatchObject({ connected: false, lastSeen: 100 });
    await store.databases.releaseAgents('cp-a');
    expect(await connected()).toEqual(['agent:a2@cp-b', 'agent:a3@cp-c', 'agent:a4@', 'dp:d3@cp-b', 'dp:d4@cp-c', 'dp:d5@']);

    // cp-b beat recently, cp-c long ago; '' (a host recorded before replicas had ids) never beats.
    expect(await store.replicaBeats.beat('cp-c', 1_000)).toBe(false);
    expect(await store.replicaBeats.beat('cp-b', 1_000)).toBe(false);
    expect(await store.replicaBeats.beat('cp-b', 5_000)).toBe(true);
    expect(await store.replicaBeats.sweep(4_000)).toBe(4);
    expect(await connected()).toEqual(['agent:a2@cp-b', 'dp:d3@cp-b']);
    // cp-c was forgotten: beating again makes it live, but its cleared hosts stay cleared until they say hello.
    expect(await store.replicaBeats.beat('cp-c', 6_000)).toBe(false);
    expect(await store.replicaBeats.sweep(4_000)).toBe(0);
    expect(await connected()).toEqual(['agent:a2@cp-b', 'dp:d3@cp-b']);
    // Once cp-b stops beating, its hosts go too.
    expect(await store.replicaBeats.sweep(5_001)).toBe(2);
    expect(await connected()).toEqual([]);
  });

  it('NodeBalancers: unique labels and ports, ids never reused, cascades, node status, traffic buckets, sealed TLS keys', async () => {
    const { store, raw } = await open();
    const r = store.nodebalancers;
    const a = await r.create(nb('alpha'));
    // Refused by the label's uniqueness (SQLite's or PostgreSQL's wording), not by anything else.
    await expect(r.create(nb('alpha'))).rejects.toThrow(/UNIQUE constraint failed: nodebalancers\.label|unique constraint "nodebalancers_label_key"/);
    const b = await r.create(nb('beta'));
    await r.delete(b.id);
    expect((await r.create(nb('gamma'))).id).toBeGreaterThan(b.id);
    await r.update(a.id, { label: 'alpha2', tags: ['x', 'y'] });
    expect(await r.byLabel('alpha2')).toMatchObject({ id: a.id, tags: ['x', 'y'] });
    const c = await r.createConfig(a.id, config(443, 'PRIVATE KEY BYTES'));
    await expect(r.createConfig(a.id, config(443))).rejects.toThrow(/UNIQUE constraint failed: nb_configs\.nodebalancer_id, nb_configs\.port|unique constraint "nb_configs_nodebalancer_id_port_key"/);
    expect((await r.config(a.id, c.id))?.sslKey).toBe('PRIVATE KEY BYTES');
    const stored = String(await raw(`SELECT ssl_key FROM nb_configs WHERE id = ${c.id}`));
    expect(stored).not.toContain('PRIVATE KEY BYTES');
    expect(stored.startsWith('fkek1:')).toBe(true);
    const n = await r.createNode(a.id, c.id, { label: 'n1', address: '10.0.0.1:80', weight: 10, mode: 'accept' } as any);
    expect(await r.setNodeStatus(n.id, 'UP')).toBe(true);
    expect(await r.setNodeStatus(n.id, 'UP')).toBe(false);
    expect((await r.node(c.id, n.id))?.status).toBe('UP');
    // A node changed in place keeps what was seen of it; at a new address, or out of reject, it
    // is one nothing has seen yet.
    await r.updateNode(n.id, { label: 'n1b', address: '10.0.0.1:80', weight: 20, mode: 'accept' } as any);
    expect((await r.node(c.id, n.id))?.status).toBe('UP');
    await r.updateNode(n.id, { label: 'n1b', address: '10.0.0.2:80', weight: 20, mode: 'accept' } as any);
    expect((await r.node(c.id, n.id))?.status).toBe('unknown');
    await r.updateNode(n.id, { label: 'n1b', address: '10.0.0.2:80', weight: 20, mode: 'reject' } as any);
    await r.setNodeStatus(n.id, 'DOWN');
    await r.updateNode(n.id, { label: 'n1b', address: '10.0.0.2:80', weight: 20, mode: 'accept' } as any);
    expect((await r.node(c.id, n.id))?.status).toBe('unknown');
    await r.addTraffic(a.id, c.id, 600_001, { bytesIn: 5, bytesOut: 6, connections: 1 });
    await r.addTraffic(a.id, c.id, 899_999, { bytesIn: 5, bytesOut: 6, connections: 1 });
    await r.addTraffic(a.id, c.id, 900_000, { bytesIn: 1, bytesOut: 1, connections: 1 });
    expect(await r.traffic(a.id, 600_000)).toEqual([{ bucket: 600_000, bytesIn: 10, bytesOut: 12, connections: 2 }, { bucket: 900_000, bytesIn: 1, bytesOut: 1, connections: 1 }]);
    await r.delete(a.id);
    expect(await r.nodesOfNodeBalancer(a.id)).toEqual([]);
    expect(await r.traffic(a.id, 0)).toEqual([]);
  });

  it('transactions span repositories: all or nothing, savepoints inside, outsiders never join', async () => {
    const { store } = await open();
    const r = store.nodebalancers;
    await expect(r.transaction(async () => {
      const x = await r.create(nb('doomed'));
      await store.addresses.allocate('10.7.0.0/24', 'nodebalancer', x.id);
      await store.kv.set('written', 'yes');
      throw new Error('abort');
    })).rejects.toThrow('abort');
    expect(await r.byLabel('doomed')).toBeUndefined();
    expect(await store.addresses.owned('nodebalancer', 1)).toEqual([]);
    expect(await store.kv.get('written')).toBeUndefined();
    // An inner failure rolls back only the inner part.
    await r.transaction(async () => {
      await r.create(nb('kept'));
      await expect(r.transaction(async () => {
        await r.create(nb('inner'));
        throw new Error('inner');
      })).rejects.toThrow('inner');
    });
    expect(await r.byLabel('kept')).toBeDefined();
    expect(await r.byLabel('inner')).toBeUndefined();
    // A call from outside while a transaction is open does not see or join its writes.
    let release!: () => void;
    const gate = new Promise<void>((res) => (release = res));
    const tx = r.transaction(async () => {
      await r.create(nb('pending'));
      await gate;
      throw new Error('rolled back');
    });
    const outside = store.kv.set('outside', 'committed');
    await new Promise((res) => setTimeout(res, 50));
    release();
    await expect(tx).rejects.toThrow('rolled back');
    await outside;
    expect(await store.kv.get('outside')).toBe('committed');
    expect(await r.byLabel('pending')).toBeUndefined();
  });

  it('databases: sealed passwords and payloads, live labels unique, backups, operations, members, agents, agent events once', async () => {
    const { store, raw } = await open();
    const r = store.databases;
    const d = await r.create(database('db1'));
    expect(d).toMatchObject({ label: 'db1', allowList: ['10.0.0.0/8'], sslConnection: true, rootPassword: 'Root.Secret_0001' });
    expect(String(await raw(`SELECT root_password FROM databases WHERE id = ${d.id}`))).not.toContain('Root.Secret_0001');
    await expect(r.create(database('db1'))).rejects.toThrow(/UNIQUE constraint failed: databases\.label|unique constraint "databases_live_label"/);
    await r.update(d.id, { deleting: true });
    const again = await r.create(database('db1'));
    expect(again.id).not.toBe(d.id);
    expect(await r.update(again.id, { status: 'active', members: { '10.0.0.1': 'primary' } })).toMatchObject({ status: 'active', members: { '10.0.0.1': 'primary' } });
    await r.syncBackups(again.id, [{ id: 1, label: 'a', type: 'auto', target: 'primary', created: 5, sizeBytes: 10 }, { id: 2, label: 'b', type: 'snapshot', target: 'primary', created: 6, sizeBytes: 10 }]);
    await r.setBackupStatus(again.id, 2, 'deleting');
    await r.syncBackups(again.id, [{ id: 3, label: 'c', type: 'auto', target: 'primary', created: 7, sizeBytes: 1 }]);
    expect((await r.backups(again.id)).map((b) => [b.id, b.status])).toEqual([[2, 'deleting'], [3, 'ready']]);
    await r.createOperation({ id: 'op1', databaseId: again.id, kind: 'resetCredentials', payload: { new_password: 'Next.Secret_0002' }, eventId: null, state: 'pending', error: null, created: 1 });
    expect(String(await raw("SELECT payload FROM database_operations WHERE id = 'op1'"))).not.toContain('Next.Secret_0002');
    expect((await r.pendingOperations(again.id)).map((o) => o.payload)).toEqual([{ new_password: 'Next.Secret_0002' }]);
    await r.finishOperation('op1', 'done', null);
    expect(await r.pendingOperations()).toEqual([]);
    expect((await r.operation('op1'))!.output).toBeNull();
    // A fence's answer (its GTID position) is kept with the result.
    await r.createOperation({ id: 'op2', databaseId: again.id, kind: 'fence', payload: { agent: 'a', term: 3, member: 1 }, eventId: null, state: 'pending', error: null, created: 2 });
    await r.finishOperation('op2', 'done', null, '0-1-42');
    expect(await r.operation('op2')).toMatchObject({ state: 'done', output: '0-1-42', payload: { agent: 'a', term: 3, member: 1 } });
    // A rollout keeps its progress in its payload (rollout.ts), sealed like any payload.
    await r.createOperation({ id: 'op3', databaseId: again.id, kind: 'rollout', payload: {}, eventId: null, state: 'pending', error: null, created: 3 });
    await r.setOperationPayload('op3', { done: [2, 3], failures: 1 });
    expect(await r.operation('op3')).toMatchObject({ state: 'pending', payload: { done: [2, 3], failures: 1 } });
    await r.finishOperation('op3', 'done', null);
    await r.setMembers(again.id, ['a', 'b', 'a']);
    expect((await r.members(again.id)).map((m) => m.agentId)).toEqual(['a', 'b', 'a']);
    await r.upsertAgent({ id: 'a', region: 'r', runtime: 'process', membersAcrossHosts: true, connected: true, replica: 'cp-a', lastSeen: 9, appliedVersion: 2, engines: [{ id: 'mysql/8.0', engine: 'mysql', version: '8.0', image: '', binary: '' }] });
    expect(await r.agent('a')).toMatchObject({ membersAcrossHosts: true, connected: true, replica: 'cp-a', engines: [{ id: 'mysql/8.0' }] });
    expect(await r.markAgentEvent('e1', again.id, 1)).toBe(true);
    expect(await r.markAgentEvent('e1', again.id, 1)).toBe(false);
    await r.purge(again.id);
    expect(await r.members(again.id)).toEqual([]);
    expect(await r.get(again.id)).toBeUndefined();
  });

  it('ids of purged databases never come back; fork, restore time and cluster secrets kept (secrets sealed); a scale down drops members', async () => {
    const { store, raw } = await open();
    const r = store.databases;
    const first = await r.create(database('ids-1'));
    await r.purge(first.id);
    const second = await r.create(database('ids-2'));
    expect(second.id).toBeGreaterThan(first.id);
    const secrets = { caCertPem: 'CERT', caKeyPem: '-----BEGIN PRIVATE KEY-----x', replPassword: 'Repl.Secret_0003' };
    const updated = await r.update(second.id, { fork: { source: 7, restoreTimeMs: 5000 }, oldestRestoreMs: 4000, clusterSecrets: secrets });
    expect(updated).toMatchObject({ fork: { source: 7, restoreTimeMs: 5000 }, oldestRestoreMs: 4000, clusterSecrets: secrets });
    const stored = String(await raw(`SELECT cluster_secrets FROM databases WHERE id = ${second.id}`));
    expect(stored).not.toContain('Repl.Secret_0003');
    expect(stored).not.toContain('PRIVATE KEY');
    await r.setMembers(second.id, ['a', 'b', 'c']);
    await r.setMembers(second.id, ['a']);
    expect((await r.members(second.id)).map((m) => [m.member, m.agentId])).toEqual([[1, 'a']]);
  });

  it('auto-backup days: each (database, day) claimed once, also by two claims at once; newest day per database; taken once reported', async () => {
    const { store } = await open();
    const r = store.databases;
    const one = await r.create(database('slots-1'));
    const two = await r.create(database('slots-2'));
    expect(await r.backupSlots()).toEqual([]);
    // Two claims of one day at once (two replicas): exactly one wins.
    const raced = await Promise.all([r.claimBackupSlot(one.id, '2030-01-08', 10), r.claimBackupSlot(one.id, '2030-01-08', 11)]);
    expect(raced.filter(Boolean)).toHaveLength(1);
    expect(await r.claimBackupSlot(one.id, '2030-01-08', 12)).toBe(false);
    expect(await r.claimBackupSlot(two.id, '2030-01-08', 13)).toBe(true);
    expect(await r.markBackupSlotsTaken(one.id, '2030-01-08', 20)).toBe(1);
    expect(await r.markBackupSlotsTaken(one.id, '2030-01-08', 21)).toBe(0);
    // A later day is a new claim and becomes the newest; an earlier report does not mark it.
    expect(await r.claimBackupSlot(one.id, '2030-01-09', 30)).toBe(true);
    expect(await r.markBackupSlotsTaken(one.id, '2030-01-08', 31)).toBe(0);
    const slots = await r.backupSlots();
    expect(slots.map((s) => [s.databaseId, s.slot, s.taken])).toEqual([[one.id, '2030-01-09', null], [two.id, '2030-01-08', null]]);
    expect(slots.find((s) => s.databaseId === one.id)!.claimed).toBe(30);
    // A database's days go with it.
    await r.purge(two.id);
    expect((await r.backupSlots()).map((s) => s.databaseId)).toEqual([one.id]);
  });

  it('member reports: one row per database and member, replaced by a newer report, gone with the database', async () => {
    const { store } = await open();
    const r = store.databases;
    const one = await r.create(database('reports-1'));
    const two = await r.create(database('reports-2'));
    const report = (databaseId: number, member: number, over: Record<string, unknown> = {}) =>
      ({ databaseId, member, agentId: `agent-${member}`, state: 'running', role: member === 1 ? 'primary' : 'replica', gtid: `0-1-${member}`, address: `10.0.0.${member}:3306`, reported: 5, ...over });
    await r.putMemberReport(report(one.id, 2));
    await r.putMemberReport(report(one.id, 1));
    await r.putMemberReport(report(two.id, 1));
    await r.putMemberReport(report(one.id, 2, { state: 'stopped', role: 'down', gtid: '0-1-9', address: '10.0.0.22:3306', reported: 6 }));
    expect(await r.memberReports(one.id)).toEqual([report(one.id, 1), report(one.id, 2, { state: 'stopped', role: 'down', gtid: '0-1-9', address: '10.0.0.22:3306', reported: 6 })]);
    expect((await r.memberReports()).map((x) => [x.databaseId, x.member])).toEqual([[one.id, 1], [one.id, 2], [two.id, 1]]);
    await r.purge(one.id);
    expect((await r.memberReports()).map((x) => x.databaseId)).toEqual([two.id]);
  });

  it('member reports: a scale down drops the reports of members past the new size, in the transaction that stores the size', async () => {
    const { store } = await open();
    const r = store.databases;
    const three = await r.create({ ...database('scale-3'), clusterSize: 3 });
    const other = await r.create({ ...database('scale-other'), clusterSize: 3 });
    const report = (databaseId: number, member: number) =>
      ({ databaseId, member, agentId: 'a', state: 'running', role: member === 1 ? 'primary' : 'replica', gtid: `0-1-${member}`, address: `10.0.1.${member}:3306`, reported: 5 });
    for (const id of [three.id, other.id]) {
      await r.setMembers(id, ['a', 'a', 'a']);
      for (const k of [1, 2, 3]) await r.putMemberReport(report(id, k));
    }
    const scaleDown = () => r.transaction(async () => {
      await r.setMembers(three.id, ['a']);
      await r.update(three.id, { clusterSize: 1, replicationType: 'none' });
    });
    // Rolled back with the size: every row is still there.
    await expect(r.transaction(async () => {
      await scaleDown();
      throw new Error('abort');
    })).rejects.toThrow('abort');
    expect((await r.memberReports(three.id)).map((x) => x.member)).toEqual([1, 2, 3]);
    expect((await r.get(three.id))!.clusterSize).toBe(3);
    await scaleDown();
    expect((await r.get(three.id))!.clusterSize).toBe(1);
    expect(await r.memberReports(three.id)).toEqual([report(three.id, 1)]);
    // Another database's rows are not touched.
    expect((await r.memberReports(other.id)).map((x) => x.member)).toEqual([1, 2, 3]);
  });

  it('a member placed on a new host gets a server_id its database never used; the others keep their index', async () => {
    const { store } = await open();
    const r = store.databases;
    const db = await r.create({ ...database('server-id-3'), clusterSize: 3 });
    const other = await r.create({ ...database('server-id-other'), clusterSize: 3 });
    await r.setMembers(db.id, ['a', 'b', 'c']);
    await r.setMembers(other.id, ['a', 'b', 'c']);
    const ids = async (id: number) => (await r.members(id)).map((m) => m.serverId ?? m.member);
    expect(await ids(db.id)).toEqual([1, 2, 3]);
    // Placed nowhere (waiting for a host): no new server, no new id.
    await r.placeMember(db.id, 2, '');
    expect(await ids(db.id)).toEqual([1, 2, 3]);
    await r.placeMember(db.id, 2, 'd');
    expect(await ids(db.id)).toEqual([1, 4, 3]);
    // Moved again: above the last one too, never back to one a server of this database had.
    await r.placeMember(db.id, 2, 'e');
    await r.placeMember(db.id, 3, 'f');
    expect(await ids(db.id)).toEqual([1, 5, 6]);
    // A resize that keeps the members keeps their ids; another database's are untouched.
    await r.setMembers(db.id, ['a', 'e', 'f']);
    expect(await ids(db.id)).toEqual([1, 5, 6]);
    expect(await ids(other.id)).toEqual([1, 2, 3]);
  });

  it('a member placed on a new host keeps its seeding mark until endSeed on that agent, and loses it when it moves', async () => {
    const { store } = await open();
    const r = store.databases;
    const db = await r.create({ ...database('seed-3'), clusterSize: 3 });
    await r.setMembers(db.id, ['a', 'b', 'c']);
    const seeds = async () => (await r.members(db.id)).map((m) => m.seed ?? null);
    expect(await seeds()).toEqual([null, null, null]);
    // GTID progress past 2^31: PostgreSQL's column must hold it.
    await r.placeMember(db.id, 2, 'd', { since: 1_700_000_000_123, gtid: 3_000_000_000 });
    expect(await seeds()).toEqual([null, { since: 1_700_000_000_123, gtid: 3_000_000_000 }, null]);
    // A resize that keeps the member where it is keeps the mark; another agent's word ends nothing.
    await r.setMembers(db.id, ['a', 'd', 'c']);
    expect((await seeds())[1]).toEqual({ since: 1_700_000_000_123, gtid: 3_000_000_000 });
    expect(await r.endSeed(db.id, 2, 'b')).toBe(false);
    expect(await r.endSeed(db.id, 2, 'd')).toBe(true);
    expect(await r.endSeed(db.id, 2, 'd')).toBe(false);
    expect(await seeds()).toEqual([null, null, null]);
    // Placed nowhere, or moved by a resize onto another agent: the mark goes with the old server.
    await r.placeMember(db.id, 3, 'e', { since: 5, gtid: 7 });
    await r.placeMember(db.id, 2, 'f', { since: 5, gtid: 7 });
    await r.placeMember(db.id, 3, '');
    await r.setMembers(db.id, ['a', 'g', '']);
    expect(await seeds()).toEqual([null, null, null]);
  });

  it('a lost host: one member moved with its report dropped, the lost mark kept apart from the agent\'s upserts', async () => {
    const { store } = await open();
    const r = store.databases;
    const db = await r.create({ ...database('lost-3'), clusterSize: 3 });
    await r.setMembers(db.id, ['a', 'b', 'c']);
    for (const [k, agentId] of [[1, 'a'], [2, 'b'], [3, 'c']] as const) {
      await r.putMemberReport({ databaseId: db.id, member: k, agentId, state: 'running', role: 'replica', gtid: '0-1-1', address: `10.0.2.${k}:3306`, reported: 5 });
    }
    await r.placeMember(db.id, 2, 'd');
    expect((await r.members(db.id)).map((m) => m.agentId)).toEqual(['a', 'd', 'c']);
    expect((await r.memberReports(db.id)).map((x) => x.member)).toEqual([1, 3]);
    const agent = { id: 'b', region: 'r', runtime: 'process', membersAcrossHosts: true, connected: false, replica: '', lastSeen: 9, appliedVersion: 1, engines: [] };
    await r.upsertAgent(agent);
    expect((await r.agent('b'))!.lostAt).toBeNull();
    expect(await r.setAgentLost('b', 1234)).toBe(true);
    expect(await r.setAgentLost('nobody', 1234)).toBe(false);
    // A report's upsert does not clear the mark; only setAgentLost does.
    await r.upsertAgent({ ...agent, connected: true });
    expect((await r.agent('b'))!.lostAt).toBe(1234);
    await r.setAgentLost('b', null);
    expect((await r.agents()).find((a) => a.id === 'b')!.lostAt).toBeNull();
    // The drain mark, like the lost one, is written only by its own call.
    expect((await r.agent('b'))!.drainingAt).toBeNull();
    expect(await r.setAgentDraining('b', 5678)).toBe(true);
    expect(await r.setAgentDraining('nobody', 5678)).toBe(false);
    await r.upsertAgent({ ...agent, connected: true });
    expect((await r.agent('b'))!.drainingAt).toBe(5678);
    await r.setAgentDraining('b', null);
    expect((await r.agents()).find((a) => a.id === 'b')!.drainingAt).toBeNull();
  });

  it('IPv6 addresses: lowest free of the range, released with the owner; a NodeBalancer keeps its ipv6', async () => {
    const { store } = await open();
    const a = store.addresses;
    expect(await a.allocateIpv6('fd00:1::/64', 'nodebalancer', 1)).toBe('fd00:1::2');
    expect(await a.allocateIpv6('fd00:1::/64', 'nodebalancer', 2)).toBe('fd00:1::3');
    await a.release('nodebalancer', 1);
    expect(await a.allocateIpv6('fd00:1::/64', 'nodebalancer', 3)).toBe('fd00:1::2');
    expect(await a.allocateIpv6('fd00:2::1/128', 'nodebalancer', 4)).toBe('fd00:2::1');
    expect(await a.allocateIpv6('fd00:2::1/128', 'nodebalancer', 5)).toBeUndefined();
    const n = await store.nodebalancers.create(nb('v6'));
    await store.nodebalancers.setIpv6(n.id, 'fd00:1::3');
    expect((await store.nodebalancers.get(n.id))!.ipv6).toBe('fd00:1::3');
  });

  it('fleet: a join token is used once, removal revokes, uses up tokens and stops renewals until a new join', async () => {
    const { store } = await open();
    await store.fleet.addToken({ id: 't', secretHash: 'h', role: 'agent', hostId: 'a1', region: '*', created: 1, expires: 2, usedAt: null });
    expect(await store.fleet.useToken('t', 5)).toBe(true);
    expect(await store.fleet.useToken('t', 6)).toBe(false);
    expect((await store.fleet.token('t'))?.usedAt).toBe(5);
    for (const serial of ['s1', 's2']) await store.fleet.addCert({ serial, role: 'agent', hostId: 'a1', region: '*', issuedAt: 1, notAfter: 9, revokedAt: null });
    await store.fleet.addToken({ id: 'unused', secretHash: 'h', role: 'agent', hostId: 'a1', region: '*', created: 1, expires: 99, usedAt: null });
    const cert = (serial: string, issuedAt = 1) => ({ serial, role: 'agent' as const, hostId: 'a1', region: '*', issuedAt, notAfter: 99, revokedAt: null });
    expect(await store.fleet.renew('s1', cert('r1', 3), { since: 0, max: 2 })).toBe('limited');
    expect(await store.fleet.renew('s1', cert('r1', 3), { since: 0, max: 9 })).toBe('recorded');
    expect(await store.fleet.issuedSince('agent', 'a1', 2)).toBe(1);
    expect(await store.fleet.removeHost('agent', 'a1', 7)).toBe(3);
    expect(await store.fleet.removeHost('agent', 'a1', 8)).toBe(0);
    expect((await store.fleet.cert('s1'))).toMatchObject({ revokedAt: 7, hostRemoved: true });
    expect(await store.fleet.removedAmong('agent', ['a1', 'a2'])).toEqual(['a1']);
    // The removal used up the host's unused token, and a renewal after it records nothing.
    expect((await store.fleet.token('unused'))?.usedAt).toBe(7);
    expect(await store.fleet.redeem('unused', 9, cert('j1'))).toBe(false);
    expect(await store.fleet.renew('r1', cert('r2'), { since: 0, max: 9 })).toBe('revoked');
    expect(await store.fleet.cert('r2')).toBeUndefined();
    // A token made after the removal brings the host back; its old certificates stay revoked.
    await store.fleet.addToken({ id: 'later', secretHash: 'h', role: 'agent', hostId: 'a1', region: '*', created: 10, expires: 99, usedAt: null });
    expect(await store.fleet.redeem('later', 11, cert('j2'))).toBe(true);
    expect(await store.fleet.removedAmong('agent', ['a1'])).toEqual([]);
    expect((await store.fleet.certs(['j2', 'r1', 'nope'])).map((c) => [c.serial, c.revokedAt, c.hostRemoved]).sort()).toEqual([['j2', null, false], ['r1', 7, false]]);
  });
  it('fleet: a renewal and a removal at once never leave an unrevoked certificate of the removed host', async () => {
    const { store } = await open();
    const cert = (serial: string, hostId: string) => ({ serial, role: 'dataplane' as const, hostId, region: '*', issuedAt: 1, notAfter: 99, revokedAt: null });
    for (let i = 0; i < 12; i++) {
      const host = `race-${i}`;
      await store.fleet.addCert(cert(`old-${i}`, host));
      // Started together: on PostgreSQL two connections, two SERIALIZABLE transactions.
      const [outcome] = await Promise.all([store.fleet.renew(`old-${i}`, cert(`new-${i}`, host), { since: 0, max: 9 }), store.fleet.removeHost('dataplane', host, 5)]);
      const renewed = await store.fleet.cert(`new-${i}`);
      if (outcome === 'recorded') expect(renewed).toMatchObject({ revokedAt: 5, hostRemoved: true });
      else expect([outcome, renewed]).toEqual(['revoked', undefined]);
    }
  });
});
