// integration-lane: concurrent (startApi on port 0 with a temp state folder and in-process scripted agents that bind nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { X509Certificate } from 'node:crypto';
import { mtlsCredentials } from '../../../lib/grpc.js';
import { isControlPlaneCert } from '../../../lib/fleet-host.js';
import type { HostPki } from '../../../lib/pki.js';
import { issueHostPki } from '../../helpers/fleet.js';
import { MYSQL, eventsFor, firstEngine, until, waitStatus } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';

/**
 * A lost agent host, the control plane's part (docs/multi-host.md, "A lost host"), over real gRPC
 * streams with scripted agents that can run part of a cluster: an operator declares a member's
 * host lost, the host is fenced and its member re-placed on the one free agent; a second loss
 * finds no free host (degraded, an event says why) until another agent joins; the lost host that
 * comes back with a new join token is sent none of its old members.
 */
describe('a lost agent host', () => {
  let api: ApiHarness;
  let engine: string;
  const agents = new Map<string, ScriptedAgent>();
  const pki = new Map<string, HostPki>();
  const start = async (id: string) => {
    pki.set(id, await issueHostPki(api.cp, 'agent', id, 'us-east'));
    const a = startScriptedAgent(api.cp.grpcAddress, { id, region: 'us-east', membersAcrossHosts: true, heartbeatMs: 500, credentials: mtlsCredentials(pki.get(id)!, isControlPlaneCert) });
    agents.set(id, a);
    return a;
  };
  const local = (agent: string, id: number) => (agents.get(agent)?.desired()?.databases.find((x) => Number(x.id) === id)?.members ?? []).filter((m) => m.local).map((m) => m.index);
  const hosts = async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data as { id: string; state: string; connected: boolean }[];
  const placements = (id: number) => api.cp.context.store.databases.members(id);

  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
    for (const id of ['host-a', 'host-b', 'host-c', 'host-d']) await start(id);
    await until('four agents up', async () => (await hosts()).filter((a) => a.state === 'up').length === 4 || undefined);
  });
  afterAll(async () => {
    for (const a of agents.values()) a.close();
    await api?.close();
  });

  it('refuses a bad id, an unknown host and a restricted user', async () => {
    const bad = await api.req('POST', '/v4/fulcrum/agents/..bad/lost');
    expect({ status: bad.status, body: bad.body }).toEqual({ status: 400, body: { errors: [{ field: 'id', reason: 'Must be the id of an agent host.' }] } });
    expect((await api.req('POST', '/v4/fulcrum/agents/no-such-host/lost')).status).toBe(404);
    const restricted = await api.userToken('ops-lite', { restricted: true, scopes: 'databases:read_write' });
    expect((await api.req('POST', '/v4/fulcrum/agents/host-d/lost', { token: restricted })).status).toBe(403);
    expect((await hosts()).find((a) => a.id === 'host-d')!.state).toBe('up');
  });

  it('fences a lost replica host, re-places its member on the free host, then finds no capacity, heals when a host joins, and gives a returning host nothing back', async () => {
    const r = await api.req('POST', MYSQL, { body: { label: 'heal-db', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3 } });
    expect(r.status).toBe(200);
    const id = r.body.id as number;
    await waitStatus(api, id, 'active');
    const before = await placements(id);
    expect(new Set(before.map((m) => m.agentId)).size).toBe(3);
    const free = ['host-a', 'host-b', 'host-c', 'host-d'].find((h) => !before.some((m) => m.agentId === h))!;
    const victim = before.find((m) => m.member === 2)!.agentId;

    // Declared lost: its state says so, its certificate is refused from then on.
    const lostAt = Date.now();
    const res = await api.req('POST', `/v4/fulcrum/agents/${victim}/lost`);
    expect(res.status).toBe(200);
    expect(res.body).toMatchObject({ id: victim, state: 'lost' });
    agents.get(victim)!.close();
    agents.delete(victim);
    expect((await hosts()).find((a) => a.id === victim)!.state).toBe('lost');
    const fenced = new X509Certificate(pki.get(victim)!.certPem).raw;
    await expect(api.cp.context.fleet.verifyPeer(fenced, 'agent')).rejects.toThrow(/revoked/);

    // Member 2 goes to the free host; the database is degraded until that member reports.
    const moved = await until('member 2 on the free host', () => (local(free, id).includes(2) ? true : undefined), 15_000);
    expect(moved).toBe(true);
    console.log(`member re-placed ${Date.now() - lostAt} ms after the host was declared lost`);
    const after = await placements(id);
    expect(after.map((m) => m.agentId)).not.toContain(victim);
    expect(new Set(after.map((m) => m.agentId)).size).toBe(3);
    const healed = await until('caught-up event', async () => (await eventsFor(api, id, 'database_update')).find((e) => /caught up/.test(e.message ?? '')), 15_000);
    expect(healed.message).toContain('3 members on 3 hosts');
    await waitStatus(api, id, 'active');
    const lostEvent = (await eventsFor(api, id, 'database_degraded')).find((e) => (e.message ?? '').includes(`agent ${victim}`));
    expect(lostEvent?.message).toContain('declared lost');

    // A second loss, of the primary's host: the failover names another primary, and with no free
    // host left the old primary's member waits, degraded, with an event that says why.
    const primaryHost = after.find((m) => m.member === 1)!.agentId;
    expect((await api.req('POST', `/v4/fulcrum/agents/${primaryHost}/lost`)).status).toBe(200);
    agents.get(primaryHost)!.close();
    agents.delete(primaryHost);
    const why = await until('no-capacity event', async () => (await eventsFor(api, id, 'database_degraded')).find((e) => /no host to go to/.test(e.message ?? '')), 20_000);
    expect(why.message).toContain('re-placed when one joins');
    const db = await waitStatus(api, id, 'degraded');
    expect(db.status).toBe('degraded');

    // A new host joins: the member goes there, and the database is whole again once it has
    // caught up with the primary. The scripted agent reports it behind (0-1-11, the primary
    // 0-1-12 or more) until told otherwise: degraded until then.
    const e = await start('host-e');
    await until('member 1 on the new host', () => (local('host-e', id).includes(1) ? true : undefined), 20_000);
    await until('member 1 reported by the new host', async () => (await api.cp.context.store.databases.memberReports(id)).some((x) => x.member === 1 && x.agentId === 'host-e') || undefined, 20_000);
    expect((await api.req('GET', `${MYSQL}/${id}`)).body.status).toBe('degraded');
    e.setNode(id, 1, { gtid: '0-1-99' });
    await waitStatus(api, id, 'active');
    expect((await eventsFor(api, id, 'database_update')).filter((x) => /caught up with the primary/.test(x.message ?? ''))).toHaveLength(2);
    const final = await placements(id);
    expect(new Set(final.map((m) => m.agentId)).size).toBe(3);
    expect(final.map((m) => m.agentId).some((a) => a === victim || a === primaryHost)).toBe(false);

    // The first lost host comes back with a new join token: it is up again and runs nothing.
    const back = await start(victim);
    const d = await until('desired state of the returning host', () => back.desired());
    expect(d.databases.map((x) => Number(x.id))).not.toContain(id);
    expect(d.deleteAllIntended).toBe(true);
    await until('returning host up', async () => (await hosts()).find((a) => a.id === victim)?.state === 'up' || undefined);
  });
});
