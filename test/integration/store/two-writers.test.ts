import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { FulcrumError } from '../../../lib/errors.js';
import { systemClock } from '../../../lib/clock.js';
import { openPostgresStore } from '../../../control-plane/store/postgres/store.js';
import type { Store } from '../../../control-plane/domain/store.js';
import { AuthService, usernameUnique, type Actor } from '../../../control-plane/domain/auth/auth-service.js';
import { EventService } from '../../../control-plane/domain/events/event-service.js';
import { RegionCatalogue } from '../../../control-plane/domain/regions.js';
import { AddressPools } from '../../../control-plane/domain/address-pools.js';
import { BackendNetworks } from '../../../control-plane/domain/nodebalancers/backend-networks.js';
import { NodeBalancerService } from '../../../control-plane/domain/nodebalancers/nodebalancer-service.js';
import { UserService } from '../../../control-plane/domain/auth/user-service.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

/**
 * Two control planes writing to one PostgreSQL at once (docs/architecture.md, "The store"): two
 * stores, each with its own pool, and a NodeBalancer service over each, as two replicas have.
 * Concurrent creates of the same label, the same port, the same username and many addresses:
 * exactly one writer wins each label, port and username, the losers get the same 400 a single
 * writer gives, and no address or id is handed out twice.
 */
describe('two writers on one PostgreSQL', () => {
  let cluster: PgCluster;
  let dir: string;
  const stores: Store[] = [];
  let services: NodeBalancerService[] = [];
  let actor: Actor;

  beforeAll(async () => {
    cluster = await startPgCluster();
    dir = mkdtempSync(join(tmpdir(), 'hapg-writers-'));
    const url = await cluster.newDatabase();
    // Both open (and migrate) at once, as two replicas starting together do.
    stores.push(...await Promise.all([0, 1].map(() => openPostgresStore(url, { kekFile: join(dir, 'keys', 'kek'), max: 5 }))));
    services = stores.map((s) => new NodeBalancerService({
      repo: s.nodebalancers, addresses: s.addresses, auth: new AuthService(s.users, s.tokens, systemClock), events: new EventService(s.events, systemClock),
      regions: new RegionCatalogue(), clock: systemClock, pool: AddressPools.parse('127.77.0.0/16', 'NodeBalancer'),
      backends: new BackendNetworks({ allowed: ['0.0.0.0/0'], servicePools: [] }), onChange: () => undefined,
    }));
    const user = await new AuthService(stores[0]!.users, stores[0]!.tokens, systemClock).ensureAdmin();
    actor = { user, token: { id: 1, userId: user.id, label: 't', scopes: '*', tokenPrefix: 'x', created: 0, expiry: null }, scopes: '*' };
  }, 180_000);
  afterAll(async () => {
    for (const s of stores) await s.close();
    await cluster?.stop();
    rmSync(dir, { recursive: true, force: true });
  }, 60_000);

  /** Runs `n` calls split over both writers, all started before any finishes. */
  const race = <T>(n: number, fn: (svc: NodeBalancerService, i: number) => Promise<T>) =>
    Promise.allSettled(Array.from({ length: n }, (_, i) => fn(services[i % 2]!, i)));

  it('creates of the same label: exactly one wins, the others get the uniqueness 400', async () => {
    const results = await race(12, (svc) => svc.create(actor, { region: 'us-east', label: 'contested' }));
    const won = results.filter((r) => r.status === 'fulfilled');
    const lost = results.filter((r): r is PromiseRejectedResult => r.status === 'rejected');
    expect(won).toHaveLength(1);
    for (const r of lost) {
      expect(r.reason).toBeInstanceOf(FulcrumError);
      expect((r.reason as FulcrumError).errors).toEqual([{ field: 'label', reason: 'Label must be unique among your NodeBalancers' }]);
    }
    expect((await stores[1]!.nodebalancers.list()).filter((nb) => nb.label === 'contested')).toHaveLength(1);
  });

  it('configs on the same port of one NodeBalancer: exactly one wins', async () => {
    const nb = await services[0]!.create(actor, { region: 'us-east', label: 'ports' });
    const results = await race(10, (svc) => svc.createConfig(actor, nb.id, { port: 8443, protocol: 'tcp' }));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results) if (r.status === 'rejected') expect((r.reason as FulcrumError).errors[0]).toMatchObject({ field: 'port', reason: 'Port must be unique.' });
    expect((await stores[0]!.nodebalancers.configs(nb.id)).map((c) => c.port)).toEqual([8443]);
  });

  it('many creates at once: every one gets its own id, label and address', async () => {
    const results = await race(24, (svc, i) => svc.create(actor, { region: 'us-east', ...(i % 3 === 0 ? {} : { label: `many-${i}` }), configs: [{ port: 80, nodes: [{ address: '10.0.0.1:80', label: 'node' }] }] }));
    const made = results.map((r) => {
      if (r.status === 'rejected') throw r.reason;
      return r.value;
    });
    const rows = (await stores[1]!.nodebalancers.list()).filter((nb) => made.some((m) => m.id === nb.id));
    expect(rows).toHaveLength(24);
    expect(new Set(rows.map((nb) => nb.ipv4)).size).toBe(24);
    expect(new Set(rows.map((nb) => nb.label)).size).toBe(24);
    expect(rows.every((nb) => nb.ipv4.startsWith('127.77.'))).toBe(true);
    const owned = (await Promise.all(rows.map((nb) => stores[0]!.addresses.owned('nodebalancer', nb.id)))).map((a) => a.join());
    expect(owned).toEqual(rows.map((nb) => nb.ipv4));
    const nodes = (await Promise.all(rows.map((nb) => stores[0]!.nodebalancers.nodesOfNodeBalancer(nb.id)))).flat();
    expect(new Set(nodes.map((n) => n.id)).size).toBe(24);
  });

  it('creates of the same username through both writers: exactly one wins, the others get the username 400', async () => {
    const users = stores.map((s) => new UserService(s.users, new AuthService(s.users, s.tokens, systemClock)));
    const results = await Promise.allSettled(Array.from({ length: 12 }, (_, i) =>
      users[i % 2]!.create(actor, { username: 'contested-user', email: `u${i}@example.com` })));
    expect(results.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of results) {
      if (r.status === 'rejected') {
        expect(r.reason).toBeInstanceOf(FulcrumError);
        expect((r.reason as FulcrumError).errors).toEqual([{ field: 'username', reason: 'Username is taken' }]);
      }
    }
    expect((await stores[1]!.users.list()).filter((u) => u.username === 'contested-user')).toHaveLength(1);

    // The store's constraint alone decides when both writers found the name free: inserts with
    // no check before them (as when two checks ran before either insert) get the same 400.
    const auths = stores.map((s) => new AuthService(s.users, s.tokens, systemClock));
    const grants = { global: {}, nodebalancer: {}, database: {} };
    const inserts = await Promise.allSettled([0, 1, 2, 3].map((i) => auths[i % 2]!.createUser('unchecked-user', true, grants)));
    expect(inserts.filter((r) => r.status === 'fulfilled')).toHaveLength(1);
    for (const r of inserts) if (r.status === 'rejected') expect((r.reason as FulcrumError).errors).toEqual([{ field: 'username', reason: 'Username is taken' }]);

    // A rename onto a taken name is the same 400, never a 500.
    const other = await users[0]!.create(actor, { username: 'renamed-user', email: 'r@example.com' });
    await expect(users[1]!.update(actor, other.username, { username: 'contested-user' })).rejects.toMatchObject({ errors: [{ field: 'username', reason: 'Username is taken' }] });
    // ...also when the check passed and the name was taken before the write (the store decides).
    await expect(usernameUnique(() => stores[0]!.users.update(other.id, { username: 'contested-user' }))).rejects.toMatchObject({ errors: [{ field: 'username', reason: 'Username is taken' }] });
  });
});
