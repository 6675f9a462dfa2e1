/**
 * docs/multi-host.md, "A lost host": declaring an agent host lost fences it. The attacker holds
 * the lost host's key and certificate (a stolen disk, or the host itself coming back on its own)
 * and opens the agent stream as that host to get its databases' desired state (with `linroot`
 * passwords and the cluster's CA key) and to speak for its old member. Refused: PERMISSION_DENIED,
 * nothing received, and the member stays placed elsewhere. Real control plane (mTLS), real gRPC.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelOptions, grpc, loadAgentProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import type { HostPki } from '../../lib/pki.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { issueHostPki } from '../helpers/fleet.js';
import { firstEngine, until, waitStatus } from '../integration/databases/helpers.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

const MYSQL = '/v4/databases/mysql/instances';

/** Opens the agent stream with `creds`, says hello as `id`, collects what arrives for `ms`. */
function tryAgentStream(address: string, creds: grpc.ChannelCredentials, id: string, ms = 2000): Promise<{ received: string; error?: grpc.ServiceError }> {
  const client = new (loadAgentProto().fulcrum.v1.AgentService as any)(address, creds, channelOptions);
  return new Promise((resolve) => {
    const out: { received: string; error?: grpc.ServiceError } = { received: '' };
    const call = client.Stream();
    const finish = () => {
      clearTimeout(timer);
      call.cancel();
      client.close();
      resolve(out);
    };
    const timer = setTimeout(finish, ms);
    call.on('data', (m: unknown) => (out.received += JSON.stringify(m)));
    call.on('error', (e: grpc.ServiceError) => {
      out.error = e;
      finish();
    });
    call.on('end', finish);
    call.write({ agentId: id, region: 'us-east', hello: true, membersAcrossHosts: true, appliedVersion: 0 });
  });
}

describe('a lost host is fenced', () => {
  let api: ApiHarness;
  const agents = new Map<string, ScriptedAgent>();
  const pki = new Map<string, HostPki>();
  const creds = (id: string) => mtlsCredentials(pki.get(id)!, isControlPlaneCert);

  beforeAll(async () => {
    api = await startApi();
    for (const id of ['fence-a', 'fence-b', 'fence-c', 'fence-d']) {
      pki.set(id, await issueHostPki(api.cp, 'agent', id, 'us-east'));
      agents.set(id, startScriptedAgent(api.cp.grpcAddress, { id, region: 'us-east', membersAcrossHosts: true, heartbeatMs: 500, credentials: creds(id) }));
    }
    await until('four agents connected', async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data.filter((a: any) => a.connected).length === 4 || undefined);
  });
  afterAll(async () => {
    for (const a of agents.values()) a.close();
    await api?.close();
  });

  it('refuses the lost host\'s certificate on the agent stream: no desired state, no password, and its member stays re-placed', async () => {
    const r = await api.req('POST', MYSQL, { body: { label: 'fence-db', region: 'us-east', type: 'g6-nanode-1', engine: await firstEngine(api), cluster_size: 3 } });
    expect(r.status).toBe(200);
    const id = r.body.id as number;
    await waitStatus(api, id, 'active');
    const members = await api.cp.context.store.databases.members(id);
    const victim = members.find((m) => m.member === 2)!.agentId;
    const password = (await api.req('GET', `${MYSQL}/${id}/credentials`)).body.password as string;

    // The control case: before the loss, the host's certificate opens its stream and gets the password.
    const before = await tryAgentStream(api.cp.grpcAddress, creds(victim), victim);
    expect(before.received).toContain(password);

    expect((await api.req('POST', `/v4/fulcrum/agents/${victim}/lost`)).status).toBe(200);
    agents.get(victim)!.close();
    const free = ['fence-a', 'fence-b', 'fence-c', 'fence-d'].find((h) => !members.some((m) => m.agentId === h))!;
    await until('member 2 re-placed', async () => (await api.cp.context.store.databases.members(id)).find((m) => m.member === 2)?.agentId === free || undefined, 15_000);

    // The attack: the lost host's own certificate, its own id.
    const after = await tryAgentStream(api.cp.grpcAddress, creds(victim), victim);
    expect(after.error?.code).toBe(grpc.status.PERMISSION_DENIED);
    expect(after.error?.details).toMatch(/revoked/);
    expect(after.received).toBe('');
    expect((await api.cp.context.store.databases.members(id)).find((m) => m.member === 2)!.agentId).toBe(free);
    const host = (await api.req('GET', '/v4/fulcrum/agents')).body.data.find((a: any) => a.id === victim);
    expect(host.state).toBe('lost');
  });
});
