/**
 * docs/security/secrets.md, "Backup keys": each database's objects in the backup store are
 * encrypted with a key the control plane makes, keeps sealed and sends only to the agents that run
 * the database. Agent B, a hand-written client with a valid agent certificate of its own, tries to
 * get database X's key (X runs on agent A): by reading everything the control plane sends it, by
 * claiming A's identity on its stream, by reporting X (and an unplaced database) as its own, and by
 * reporting a key of its own for X, which would make X's future objects readable to B. Each is
 * refused or leaves B without the key, while A, and every member agent of a 3-node cluster, get
 * theirs. A real control plane (mTLS, its own CA), real sockets and real gRPC.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelOptions, grpc, loadAgentProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import type { HostPki } from '../../lib/pki.js';
import type { AgentReport } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { DatabaseRepository } from '../../control-plane/domain/databases/repository.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { issueHostPki } from '../helpers/fleet.js';
import { firstEngine, MYSQL, until, waitStatus } from '../integration/databases/helpers.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

/** A hand-written agent stream: sends what it is told, keeps everything it receives. */
interface RawAgent {
  send(report: Partial<AgentReport>): void;
  received(): string;
  count(): number;
  /** The stream's error, once the control plane ended it. */
  error(): grpc.ServiceError | undefined;
  close(): void;
}

function openRawAgent(address: string, creds: grpc.ChannelCredentials, id: string): RawAgent {
  const client = new (loadAgentProto().fulcrum.v1.AgentService as any)(address, creds, channelOptions);
  const call = client.Stream();
  let received = '';
  let count = 0;
  let error: grpc.ServiceError | undefined;
  call.on('data', (m: unknown) => {
    received += JSON.stringify(m);
    count++;
  });
  call.on('error', (e: grpc.ServiceError) => (error = e));
  return {
    send: (report) => call.write({ agentId: id, region: 'us-east', atMs: Date.now(), runtime: 'process', ...report }),
    received: () => received,
    count: () => count,
    error: () => error,
    close() {
      call.cancel();
      client.close();
    },
  };
}

describe('a database\'s backup key reaches only the agents that run it', () => {
  let api: ApiHarness;
  let repo: DatabaseRepository;
  let engine: string;
  let agentA: ScriptedAgent;
  let agentB: RawAgent;
  const others: ScriptedAgent[] = [];
  let x: number;
  let marker = 0;
  const creds = async (id: string) => mtlsCredentials(await issueHostPki(api.cp, 'agent', id, 'us-east') as HostPki, isControlPlaneCert);
  const keyOf = async (id: number) => (await repo.get(id))!.backupKey!;
  const desiredKey = (agent: ScriptedAgent, id: number) => agent.desired()?.databases.find((d) => Number(d.id) === id)?.backupKey ?? '';
  const create = async (body: Record<string, unknown>) => {
    const r = await api.req('POST', MYSQL, { body: { region: 'us-east', type: 'g6-nanode-1', engine, allow_list: [], ...body } });
    expect(r.status, JSON.stringify(r.body)).toBe(200);
    return r.body.id as number;
  };

  /**
   * B's reports are applied in order: once a later report's runtime is stored, every earlier one
   * has been applied (or ignored). Its hello makes the control plane send B its whole desired
   * state after that, so B holds everything it would be sent.
   */
  const syncB = async () => {
    const runtime = `marker-${++marker}`;
    const seen = agentB.count();
    agentB.send({ runtime, hello: true });
    await until(`agent-b's report ${runtime} applied`, async () => (await repo.agent('keys-b'))?.runtime === runtime && agentB.count() > seen, 30_000);
  };

  beforeAll(async () => {
    api = await startApi();
    repo = api.cp.context.store.databases;
    const addr = api.cp.grpcAddress;
    agentA = startScriptedAgent(addr, { id: 'keys-a', region: 'us-east', membersAcrossHosts: true, credentials: await creds('keys-a') });
    engine = await firstEngine(api);
    x = await create({ label: 'keys-x' });
    await waitStatus(api, x, 'active', 30_000);
    expect((await repo.get(x))!.agentId).toBe('keys-a');
    agentB = openRawAgent(addr, await creds('keys-b'), 'keys-b');
    await syncB();
  }, 60_000);

  afterAll(async () => {
    agentB?.close();
    for (const a of others) a.close();
    agentA?.close();
    await api?.close();
  });

  it('the control plane made X\'s key, keeps it sealed, and sends it to X\'s agent (the control case)', async () => {
    const key = await keyOf(x);
    expect(Buffer.from(key, 'base64')).toHaveLength(32);
    await until('A holds X\'s key', async () => desiredKey(agentA, x) === key || undefined);
  });

  it('B, reading all it is sent, gets its own database\'s key and never X\'s', async () => {
    // B is the least loaded agent now: a new database goes to it, with its own key.
    const y = await create({ label: 'keys-y' });
    await until('Y placed on B', async () => (await repo.get(y))!.agentId === 'keys-b' || undefined);
    await syncB();
    expect(agentB.received()).toContain(await keyOf(y));
    expect(await keyOf(y)).not.toBe(await keyOf(x));
    expect(agentB.received()).not.toContain(await keyOf(x));
    expect(agentB.received()).not.toContain('keys-x');
  });

  it('B claiming A\'s identity on its stream is refused and receives nothing', async () => {
    const impostor = openRawAgent(api.cp.grpcAddress, await creds('keys-b'), 'keys-a');
    try {
      impostor.send({ hello: true, databases: [{ id: x, status: 'active' }] });
      await until('the impostor refused', async () => impostor.error() ?? undefined, 30_000);
      expect(impostor.received()).toBe('');
    } finally {
      impostor.close();
    }
    expect(desiredKey(agentA, x)).toBe(await keyOf(x));
  });

  it('B reporting X, or an unplaced database, as its own gets neither key', async () => {
    // No agent serves lab-local: U stays unplaced, but has its key already.
    const u = await create({ label: 'keys-unplaced', region: 'lab-local' });
    expect(await keyOf(u)).toBeTruthy();
    agentB.send({ databases: [{ id: x, status: 'active', convergedGeneration: 1 }, { id: u, status: 'active', convergedGeneration: 1 }] });
    await syncB();
    expect((await repo.get(u))!.agentId).toBeNull();
    expect((await repo.get(x))!.agentId).toBe('keys-a');
    expect(agentB.received()).not.toContain(await keyOf(x));
    expect(agentB.received()).not.toContain(await keyOf(u));
  });

  it('B reporting a key of its own for X does not replace X\'s key', async () => {
    const before = await keyOf(x);
    const forged = Buffer.alloc(32, 7).toString('base64');
    agentB.send({ databases: [{ id: x, status: 'active', backupKey: forged }] });
    await syncB();
    expect(await keyOf(x)).toBe(before);
    expect(desiredKey(agentA, x)).toBe(before);
  });

  it('a 3-node cluster\'s key goes to each of its three member agents and not to B', async () => {
    const c = startScriptedAgent(api.cp.grpcAddress, { id: 'keys-c', region: 'us-east', membersAcrossHosts: true, credentials: await creds('keys-c') });
    const d = startScriptedAgent(api.cp.grpcAddress, { id: 'keys-d', region: 'us-east', membersAcrossHosts: true, credentials: await creds('keys-d') });
    others.push(c, d);
    await until('C and D connected', async () => ((await repo.agent('keys-c'))?.membersAcrossHosts && (await repo.agent('keys-d'))?.membersAcrossHosts) || undefined);
    const z = await create({ label: 'keys-z', cluster_size: 3, replication_type: 'semi_synch' });
    await until('Z placed', async () => (await repo.members(z)).length === 3 || undefined);
    expect(new Set((await repo.members(z)).map((m) => m.agentId))).toEqual(new Set(['keys-a', 'keys-c', 'keys-d']));
    const key = await keyOf(z);
    for (const agent of [agentA, c, d]) await until('a member agent holds Z\'s key', async () => desiredKey(agent, z) === key || undefined);
    await syncB();
    expect(agentB.received()).not.toContain(key);
    expect(agentB.received()).not.toContain('keys-z');
  });

  it('a fork gets a key of its own; the source\'s stays with the source\'s agent', async () => {
    const oldest = Math.floor(Date.now() / 1000) * 1000 - 120_000;
    agentA.setOldestRestore(x, oldest);
    await until('X restorable', async () => (await repo.get(x))!.oldestRestoreMs === oldest || undefined);
    const f = await create({ label: 'keys-fork', fork: { source: x, restore_time: new Date(oldest + 60_000).toISOString().slice(0, 19) } });
    await until('the fork placed on X\'s agent', async () => (await repo.get(f))!.agentId === 'keys-a' || undefined);
    const key = await keyOf(f);
    expect(key).not.toBe(await keyOf(x));
    await until('A holds the fork\'s key', async () => desiredKey(agentA, f) === key || undefined);
    await syncB();
    expect(agentB.received()).not.toContain(key);
    expect(agentB.received()).not.toContain(await keyOf(x));
  });
});
