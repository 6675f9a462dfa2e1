// integration-lane: concurrent (startApi: an in-process control plane on port 0 with a temp state folder; addresses only as data, nothing bound but port 0).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { grpc, loadConfigProto } from '../../../lib/grpc.js';
import type { ConfigAck } from '../../../proto/gen/fulcrum/v1/ConfigAck.js';
import type { ConfigSnapshot__Output } from '../../../proto/gen/fulcrum/v1/ConfigSnapshot.js';
import { waitFor } from '../../helpers/backends.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { apiErrors, baseRequest, pointLinodeClientAt, sdk } from '../../helpers/api-linode-client.js';
import { validatedOperations } from '../../helpers/api-schema.js';
import { clientTypedOperations } from '../../helpers/api-v4-shapes.js';
import type { DatabaseRecord } from '../../../control-plane/domain/databases/model.js';

/**
 * The account surface clients read first, through @linode/api-v4 0.158.0: every
 * body the SDK receives is checked by the response interceptor against the official schema
 * (grants) or the schema typed from the SDK's own types (test/helpers/api-v4-shapes.ts).
 */
const {
  createNodeBalancer, getAccountAgreements, getAccountAvailabilities, getAccountMaintenance, getFirewalls, getSSHKeys, getAccountInfo, getAccountSettings, getMyGrants, getNotifications, getProfile, getTags, getUserPreferences,
  updateAccountSettings, updateProfile, updateUserPreferences,
} = sdk;

describe('account surface through @linode/api-v4', () => {
  let api: ApiHarness;
  let token: string | null;
  let unpoint: () => void;
  let webId: number;
  let secretId: number;
  let restricted: string;

  beforeAll(async () => {
    // Plain gRPC so that the test can play a data plane that refuses its configuration.
    api = await startApi({ insecureGrpc: true });
    token = api.token;
    unpoint = pointLinodeClientAt(api.url, () => token);
    webId = (await createNodeBalancer({ region: 'us-east', label: 'acct-web', tags: ['web', 'prod'], configs: [] })).id;
    secretId = (await createNodeBalancer({ region: 'us-east', label: 'acct-secret', tags: ['secret', 'prod'], configs: [] })).id;
    restricted = await api.userToken('acct-ro', { restricted: true, grants: { nodebalancer: { [webId]: 'read_only' } } });
  });
  afterAll(async () => {
    unpoint();
    await api?.close();
  });

  const as = async <T>(t: string, fn: () => Promise<T>): Promise<T> => {
    const before = token;
    token = t;
    try {
      return await fn();
    } finally {
      token = before;
    }
  };

  it('GET/PUT /profile: the token\'s user; email and timezone change, read-only and unknown fields are refused by name', async () => {
    const p = await getProfile();
    expect(p).toMatchObject({ username: 'admin', restricted: false, timezone: 'UTC', two_factor_auth: false, authorized_keys: null });
    expect(p.uid).toBeGreaterThan(0);
    const u = await updateProfile({ email: 'ops@example.com', timezone: 'America/New_York' });
    expect(u).toMatchObject({ email: 'ops@example.com', timezone: 'America/New_York' });
    expect(await getProfile()).toEqual(u);
    // Sending back read-only fields with the values GET answered is accepted.
    expect(await updateProfile({ username: 'admin', restricted: false, uid: p.uid, timezone: 'Europe/Berlin' })).toMatchObject({ timezone: 'Europe/Berlin' });

    // The SDK checks the email itself; the server is asked directly to see its answer.
    const bad = await api.req('PUT', '/v4/profile', { body: { timezone: 'Mars/Olympus', email: 'nope', username: 'root', restricted: true, shoe_size: 44 } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors.map((e: any) => e.field).sort()).toEqual(['email', 'restricted', 'shoe_size', 'timezone', 'username']);
    expect((await apiErrors(updateProfile({ two_factor_auth: true }))).errors[0]!.field).toBe('two_factor_auth');
    expect((await getProfile()).timezone).toBe('Europe/Berlin');

    // A restricted user sees its own profile, with any scope.
    const own = await as(restricted, () => getProfile());
    expect(own).toMatchObject({ username: 'acct-ro', restricted: true, timezone: 'UTC' });
    expect(own.uid).not.toBe(p.uid);
  });

  it('grants carry every key today\'s clients read (firewall, lkecluster as empty lists)', async () => {
    const g = await as(restricted, () => getMyGrants());
    expect(g.firewall).toEqual([]);
    expect(g.lkecluster).toEqual([]);
    expect(g.global).toMatchObject({ add_lkes: false, add_kubernetes: false, account_access: null });
    expect(g.nodebalancer).toEqual([{ id: webId, label: 'acct-web', permissions: 'read_only' }]);
  });

  it('GET/PUT /profile/preferences: per user, replaced whole, size-capped, bad bodies named', async () => {
    expect(await getUserPreferences()).toEqual({});
    const prefs = { theme: 'dark', sortKeys: { 'nodebalancers-landing': { order: 'asc', orderBy: 'label' } }, desktop_notifications: false };
    expect(await updateUserPreferences(prefs)).toEqual(prefs);
    expect(await updateUserPreferences({ theme: 'light' })).toEqual({ theme: 'light' });
    expect(await getUserPreferences()).toEqual({ theme: 'light' });
    expect(await as(restricted, () => getUserPreferences())).toEqual({});

    const big = await apiErrors(updateUserPreferences({ blob: 'x'.repeat(70 * 1024) }));
    expect(big.status).toBe(400);
    expect(big.errors[0]!.field).toBe('preferences');
    let deep: Record<string, unknown> = {};
    for (let i = 0; i < 40; i++) deep = { d: deep };
    expect((await apiErrors(updateUserPreferences(deep))).errors[0]!.field).toBe('preferences');
    const arr = await api.req('PUT', '/v4/profile/preferences', { rawBody: '[1,2]' });
    expect({ status: arr.status, body: arr.body }).toEqual({ status: 400, body: { errors: [{ reason: 'The request body must be a JSON object' }] } });
    expect(await getUserPreferences()).toEqual({ theme: 'light' });
  });

  it('GET /account names what this install serves; account endpoints are for unrestricted users', async () => {
    const a = await getAccountInfo();
    expect(a.capabilities).toEqual(expect.arrayContaining(['NodeBalancers', 'Managed Databases']));
    expect(a.capabilities).not.toContain('Linodes');
    expect(a.balance).toBe(0);
    expect(a.email).toBe('ops@example.com');
    for (const call of [() => getAccountInfo(), () => getAccountSettings(), () => updateAccountSettings({ network_helper: false })]) {
      expect((await as(restricted, () => apiErrors(call()))).status).toBe(403);
    }
  });

  it('GET/PUT /account/settings: kept as set; read-only and unknown settings refused by name', async () => {
    expect(await getAccountSettings()).toEqual({
      backups_enabled: false, interfaces_for_new_linodes: 'legacy_config_only', longview_subscription: null,
      maintenance_policy: 'linode/migrate', managed: false, network_helper: true, object_storage: 'disabled',
    });
    const s = await updateAccountSettings({ network_helper: false, maintenance_policy: 'linode/power_off_on' });
    expect(s).toMatchObject({ network_helper: false, maintenance_policy: 'linode/power_off_on', managed: false });
    expect(await getAccountSettings()).toEqual(s);
    // The SDK validates some of these itself; the server is asked directly to see its answer.
    const bad = await api.req('PUT', '/v4/account/settings', { body: { network_helper: 'no', managed: true, interfaces_for_new_linodes: 'any', colour: 'red' } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors.map((e: any) => e.field).sort()).toEqual(['colour', 'interfaces_for_new_linodes', 'managed', 'network_helper']);
    expect(await getAccountSettings()).toEqual(s);
  });

  it('GET /account/notifications: pending database maintenance and a data plane\'s refusal; restricted users see only their entities', async () => {
    expect((await getNotifications()).data).toEqual([]);
    // A data plane refuses the configuration it is sent (a NACK over the real stream).
    const leave = await nackFirstSnapshot(api.cp.grpcAddress, 'dp-acct', 'bind 127.0.0.1:80: address in use');
    try {
      await waitFor(async () => (await getNotifications()).data.length === 1, 20_000, 'the refusal as a notification');
    } finally {
      leave();
    }
    // The state an agent's report of a new engine build waiting for the window leaves behind.
    const ctx = api.cp.context;
    const db = await ctx.store.databases.create(pendingDatabase('acct-db'));
    const all = (await getNotifications()).data;
    expect(all).toHaveLength(2);
    const maint = all.find((n: any) => n.type === 'maintenance_scheduled');
    expect(maint.entity).toEqual({ id: db.id, label: 'acct-db', type: 'database', url: `/v4/databases/mysql/instances/${db.id}` });
    expect(maint.when).not.toBeNull();
    const notice = all.find((n: any) => n.type === 'notice');
    expect(notice).toMatchObject({ entity: null, severity: 'major', label: 'A data plane refused a NodeBalancer configuration' });
    expect(notice.when).toMatch(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}$/);
    expect(notice.message).toContain('dp-acct');
    expect(notice.message).toContain('address in use');
    expect((await as(restricted, () => getNotifications())).data).toEqual([]);
    api.setGrants('acct-ro', { nodebalancer: { [webId]: 'read_only' }, database: { [db.id]: 'read_only' } });
    expect((await as(restricted, () => getNotifications())).data.map((n: any) => n.entity?.id)).toEqual([db.id]);
    api.setGrants('acct-ro', { nodebalancer: { [webId]: 'read_only' } });
  });

  it('GET /tags and /tags/{label}: the tags NodeBalancers carry, as far as the caller can see', async () => {
    expect((await getTags()).data).toEqual([{ label: 'prod' }, { label: 'secret' }, { label: 'web' }]);
    expect((await as(restricted, () => getTags())).data).toEqual([{ label: 'prod' }, { label: 'web' }]);
    // @linode/api-v4 has no function for one tag; its own axios instance makes the call.
    const prod = (await baseRequest.get('https://api.linode.com/v4/tags/prod')).data;
    expect(prod.results).toBe(2);
    expect(prod.data.map((o: any) => [o.type, o.data.id, o.data.label])).toEqual([['nodebalancer', webId, 'acct-web'], ['nodebalancer', secretId, 'acct-secret']]);
    const mine = await as(restricted, async () => (await baseRequest.get('https://api.linode.com/v4/tags/prod')).data);
    expect(mine.data.map((o: any) => o.data.id)).toEqual([webId]);
    expect((await as(restricted, () => apiErrors(baseRequest.get('https://api.linode.com/v4/tags/secret')))).status).toBe(404);
    expect((await apiErrors(baseRequest.get('https://api.linode.com/v4/tags/none'))).status).toBe(404);
  });

  it('answers what the real service answers an account without firewalls, SSH keys, maintenance or agreements', async () => {
    for (const list of [getFirewalls, getSSHKeys, getAccountMaintenance]) expect(await list()).toEqual({ data: [], page: 1, pages: 1, results: 0 });
    const avail = await getAccountAvailabilities();
    expect(avail.data.map((a: any) => a.region)).toContain('us-east');
    expect(avail.data.every((a: any) => a.unavailable.length === 0)).toBe(true);
    expect(await getAccountAgreements()).toEqual({ billing_agreement: false, eu_model: false, privacy_policy: false });
  });

  it('checked every client-typed operation against its schema', () => {
    expect(Object.keys(clientTypedOperations).filter((op) => !validatedOperations.has(op))).toEqual([]);
  });

  it('keeps preferences, profile and settings across a restart', async () => {
    await api.cp.close();
    const again = await startApi({ stateDir: api.stateDir });
    try {
      token = again.token;
      unpoint();
      unpoint = pointLinodeClientAt(again.url, () => token);
      expect(await getUserPreferences()).toEqual({ theme: 'light' });
      expect((await getProfile()).timezone).toBe('Europe/Berlin');
      expect((await getAccountSettings()).network_helper).toBe(false);
    } finally {
      await again.cp.close();
    }
  }, 60_000);
});

/** Plays a data plane that answers its first snapshot with an error (a NACK); returns its close. */
async function nackFirstSnapshot(address: string, id: string, error: string): Promise<() => void> {
  const proto = loadConfigProto();
  const client = new proto.fulcrum.v1.ConfigService(address, grpc.credentials.createInsecure()) as any;
  const call = client.Stream() as grpc.ClientDuplexStream<ConfigAck, ConfigSnapshot__Output>;
  call.on('error', () => undefined);
  const close = () => {
    call.cancel();
    client.close();
  };
  try {
    const snap = await new Promise<ConfigSnapshot__Output>((resolve, reject) => {
      const timer = setTimeout(() => reject(new Error('no snapshot within 20 s')), 20_000);
      call.once('data', (s: ConfigSnapshot__Output) => (clearTimeout(timer), resolve(s)));
      call.write({ dataplaneId: id, region: '*', versionApplied: 0, responseNonce: '', incremental: false });
    });
    call.write({ dataplaneId: id, region: '*', versionApplied: 0, responseNonce: snap.nonce, errorDetail: error });
    return close;
  } catch (err) {
    close();
    throw err;
  }
}

function pendingDatabase(label: string): Omit<DatabaseRecord, 'id'> {
  return {
    label, region: 'us-east', type: 'g6-nanode-1', engineId: 'mysql/8.0', version: '8.0', image: '', binary: '', clusterSize: 1, replicationType: 'none',
    encrypted: false, sslConnection: true, allowList: [], updates: { frequency: 'weekly', duration: 3, hour_of_day: 0, day_of_week: 1, week_of_month: null },
    status: 'active', hostPrimary: '', hostSecondary: null, port: 3306, provisioned: true, members: {}, caCert: null, usedDiskMb: null, patchPending: true,
    engineConfig: {}, rootPassword: 'Root.Secret_0001', nextPassword: null, generation: 1, convergedGeneration: 1, runState: 'running', agentId: null, term: 1,
    primaryMember: 1, pendingEventId: null, secondEventId: null, deleting: false, deleteEventId: null, lastError: null, created: 1000, updated: 1000,
  } as Omit<DatabaseRecord, 'id'>;
}
