/**
 * docs/multi-host.md, "Planned switchover": the fence of a switchover is an operation addressed to
 * the primary's agent, and its answer (the fenced primary's GTID position) decides how far the
 * target must catch up before it is named primary. Agent B runs a replica of the same spread
 * cluster (so it does hold the database) but not the primary. The attack: B, with its own valid
 * certificate, answers the fence for the primary's agent with a position of its choosing (a low
 * one would let the target be named before it has every acknowledged write). Refused: the
 * operation stays pending with no position, and B is never sent the fence. The control case: the
 * primary's agent answers and its position is kept. Real control plane (mTLS), real gRPC.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { randomUUID } from 'node:crypto';
import { channelOptions, grpc, loadAgentProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import type { HostPki } from '../../lib/pki.js';
import type { AgentReport } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { DatabaseRepository } from '../../control-plane/domain/databases/repository.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { issueHostPki } from '../helpers/fleet.js';
import { databaseRecord } from '../helpers/database-record.js';
import { until } from '../integration/databases/helpers.js';

interface RawAgent {
  send(report: Partial<AgentReport>): void;
  received(): string;
  count(): number;
  close(): void;
}

function openRawAgent(address: string, pki: HostPki, id: string): RawAgent {
  const client = new (loadAgentProto().fulcrum.v1.AgentService as any)(address, mtlsCredentials(pki, isControlPlaneCert), channelOptions);
  const call = client.Stream();
  let received = '';
  let count = 0;
  call.on('data', (m: unknown) => {
    received += JSON.stringify(m);
    count++;
  });
  call.on('error', (_e: grpc.ServiceError) => undefined);
  return {
    send: (report) => call.write({ agentId: id, region: 'us-east', atMs: Date.now(), runtime: 'process', membersAcrossHosts: true, ...report }),
    received: () => received,
    count: () => count,
    close() {
      call.cancel();
      client.close();
    },
  };
}

describe('a switchover\'s fence is answered only by the primary\'s agent', () => {
  let api: ApiHarness;
  let repo: DatabaseRepository;
  const raw = new Map<string, RawAgent>();
  let marker = 0;

  /** Once a later report's runtime is stored, every earlier report of that agent has been applied. */
  const sync = async (id: string) => {
    const runtime = `marker-${++marker}`;
    const a = raw.get(id)!;
    const seen = a.count();
    a.send({ runtime, hello: true });
    await until(`${id}'s report ${runtime} applied`, async () => (await repo.agent(id))?.runtime === runtime && a.count() > seen, 20_000);
  };

  beforeAll(async () => {
    api = await startApi();
    repo = api.cp.context.store.databases;
    for (const id of ['sw-a', 'sw-b', 'sw-c']) {
      raw.set(id, openRawAgent(api.cp.grpcAddress, await issueHostPki(api.cp, 'agent', id, 'us-east'), id));
      await sync(id);
    }
  });

  afterAll(async () => {
    for (const a of raw.values()) a.close();
    await api?.close();
  });

  it('ignores B\'s answer to the fence addressed to A, sends B no fence, and keeps A\'s answer', async () => {
    const row = await repo.create(databaseRecord({
      label: 'sw-fence', clusterSize: 3, replicationType: 'semi_synch', status: 'active', hostPrimary: '198.18.99.1', provisioned: true, convergedGeneration: 1, agentId: 'sw-a',
    }));
    await repo.setMembers(row.id, ['sw-a', 'sw-b', 'sw-c']);
    await repo.update(row.id, { term: 3, primaryMember: 1 });
    const id = randomUUID();
    await repo.createOperation({ id, databaseId: row.id, kind: 'fence', payload: { agent: 'sw-a', term: 3, member: 1 }, eventId: null, state: 'pending', error: null, created: Date.now() });

    // B holds the database (member 2) and answers A's fence with a position of its own.
    await sync('sw-b');
    expect(raw.get('sw-b')!.received()).not.toContain(id);
    raw.get('sw-b')!.send({ operationResults: [{ operationId: id, databaseId: row.id, ok: true, position: '0-1-1' }] });
    await sync('sw-b');
    expect(await repo.operation(id)).toMatchObject({ state: 'pending', output: null });

    // The control case: A is sent the fence and its answer ends it with A's position.
    await sync('sw-a');
    expect(raw.get('sw-a')!.received()).toContain(id);
    raw.get('sw-a')!.send({ operationResults: [{ operationId: id, databaseId: row.id, ok: true, position: '0-1-99' }] });
    await sync('sw-a');
    expect(await repo.operation(id)).toMatchObject({ state: 'done', output: '0-1-99' });

    // A's answer is kept only as a position: a huge or malformed one is dropped (the switchover
    // then has no position and is abandoned), never sent on to the target's agent.
    const id2 = randomUUID();
    await repo.createOperation({ id: id2, databaseId: row.id, kind: 'fence', payload: { agent: 'sw-a', term: 3, member: 1 }, eventId: null, state: 'pending', error: null, created: Date.now() });
    raw.get('sw-a')!.send({ operationResults: [{ operationId: id2, databaseId: row.id, ok: true, position: `0-1-1,${'9'.repeat(100_000)}` }] });
    await sync('sw-a');
    expect(await repo.operation(id2)).toMatchObject({ state: 'done', output: null });
  });
});
