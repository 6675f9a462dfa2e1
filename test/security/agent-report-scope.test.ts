/**
 * docs/databases.md, "Whose report counts": agents may run on hosts of tenants who do not trust
 * each other, so a compromised agent (a valid certificate of its own) must not change a database
 * placed on another agent through its reports. Agent B, a hand-written client with its own agent
 * certificate, reports agent A's database: an auto-backup day taken, a result for A's pending
 * operation, a status, backups, events, node positions; and an unplaced database as if it ran it.
 * Nothing of it takes effect, while the same reports from A do. A real control plane (mTLS, its
 * own CA), real sockets and real gRPC.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { channelOptions, grpc, loadAgentProto, mtlsCredentials } from '../../lib/grpc.js';
import { isControlPlaneCert } from '../../lib/fleet-host.js';
import { utcDay } from '../../lib/utc-day.js';
import type { HostPki } from '../../lib/pki.js';
import type { AgentReport } from '../../proto/gen/fulcrum/v1/AgentReport.js';
import type { DatabaseRepository } from '../../control-plane/domain/databases/repository.js';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { issueHostPki } from '../helpers/fleet.js';
import { eventsFor, firstEngine, MYSQL, until, waitStatus } from '../integration/databases/helpers.js';
import { startScriptedAgent, type ScriptedAgent } from '../integration/databases/scripted-agent.js';

/** A hand-written agent stream: sends what it is told, keeps everything it receives. */
interface RawAgent {
  send(report: Partial<AgentReport>): void;
  received(): string;
  /** How many desired states arrived. */
  count(): number;
  close(): void;
}

function openRawAgent(address: string, creds: grpc.ChannelCredentials, id: string): RawAgent {
  const client = new (loadAgentProto().fulcrum.v1.AgentService as any)(address, creds, channelOptions);
  const call = client.Stream();
  let received = '';
  let count = 0;
  call.on('data', (m: unknown) => {
    received += JSON.stringify(m);
    count++;
  });
  call.on('error', () => undefined);
  return {
    send: (report) => call.write({ agentId: id, region: 'us-east', atMs: Date.now(), runtime: 'process', ...report }),
    received: () => received,
    count: () => count,
    close() {
      call.cancel();
      client.close();
    },
  };
}

describe('an agent\'s report changes only databases it holds', () => {
  let api: ApiHarness;
  let repo: DatabaseRepository;
  let agentA: ScriptedAgent;
  let agentB: RawAgent;
  let dbA: any;
  let unplaced: any;
  let marker = 0;
  const day = utcDay(Date.now());
  const creds = (pki: HostPki) => mtlsCredentials(pki, isControlPlaneCert);

  /**
   * B's reports are applied in order: once a later report's runtime is stored, every earlier one
   * has been applied (or ignored), so what did not change will not change. Its hello makes the
   * control plane send B its whole desired state after that, so B holds what it would be sent.
   */
  const syncB = async () => {
    const runtime = `marker-${++marker}`;
    const seen = agentB.count();
    agentB.send({ runtime, hello: true });
    await until(`agent-b's report ${runtime} applied`, async () => (await repo.agent('agent-b'))?.runtime === runtime && agentB.count() > seen, 20_000);
  };

  beforeAll(async () => {
    api = await startApi();
    repo = api.cp.context.store.databases;
    const addr = api.cp.grpcAddress;
    agentA = startScriptedAgent(addr, { id: 'agent-a', region: 'us-east', credentials: creds(await issueHostPki(api.cp, 'agent', 'agent-a', 'us-east')) });
    const engine = await firstEngine(api);
    const created = await api.req('POST', MYSQL, { body: { label: 'scope-a', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: [] } });
    expect(created.status).toBe(200);
    dbA = await waitStatus(api, created.body.id, 'active');
    expect((await repo.get(dbA.id))!.agentId).toBe('agent-a');
    // No agent serves lab-local: this database stays unplaced.
    const other = await api.req('POST', MYSQL, { body: { label: 'scope-unplaced', region: 'lab-local', type: 'g6-nanode-1', engine, allow_list: [] } });
    expect(other.status).toBe(200);
    unplaced = other.body;
    agentB = openRawAgent(addr, creds(await issueHostPki(api.cp, 'agent', 'agent-b', 'us-east')), 'agent-b');
    await syncB();
  });

  afterAll(async () => {
    agentB?.close();
    agentA?.close();
    await api?.close();
  });

  it('an auto-backup day: B\'s report of A\'s day leaves the claim open; A\'s own report marks it taken', async () => {
    expect(await repo.claimBackupSlot(dbA.id, day, Date.now())).toBe(true);
    const slot = async () => (await repo.backupSlots()).find((s) => s.databaseId === dbA.id);
    agentB.send({ databases: [{ id: dbA.id, status: 'active', lastAutoBackupDay: day }] });
    await syncB();
    expect(await slot()).toMatchObject({ slot: day, taken: null });
    // The control case: the agent holding the database reports the same day.
    agentA.setAutoBackupDay(dbA.id, day);
    await until('the day marked taken', async () => ((await slot())?.taken ?? null) !== null);
  });

  it('an operation result: B cannot end A\'s pending credential reset; A\'s result does', async () => {
    const before = (await api.req('GET', `${MYSQL}/${dbA.id}/credentials`)).body.password;
    agentA.hold(true);
    expect((await api.req('POST', `${MYSQL}/${dbA.id}/credentials/reset`)).status).toBe(200);
    const op = (await repo.pendingOperations(dbA.id)).find((o) => o.kind === 'resetCredentials')!;
    expect(op).toBeDefined();
    // Under A's id and under another database's id: the operation's own database decides.
    agentB.send({ operationResults: [{ operationId: op.id, databaseId: dbA.id, ok: true }, { operationId: op.id, databaseId: unplaced.id, ok: true }] });
    await syncB();
    expect((await repo.operation(op.id))!.state).toBe('pending');
    expect((await api.req('GET', `${MYSQL}/${dbA.id}/credentials`)).body.password).toBe(before);
    // The control case: A answers.
    agentA.hold(false);
    await until('the reset finished', async () => (await repo.operation(op.id))!.state === 'done');
    expect((await api.req('GET', `${MYSQL}/${dbA.id}/credentials`)).body.password).not.toBe(before);
  });

  it('status, CA, disk, backups, events and node positions of A\'s database from B change nothing', async () => {
    const row = async () => {
      const d = (await repo.get(dbA.id))!;
      return { status: d.status, caCert: d.caCert, usedDiskMb: d.usedDiskMb, members: d.members, lastError: d.lastError, agentId: d.agentId, term: d.term };
    };
    const before = await row();
    agentB.send({
      databases: [{
        id: dbA.id, status: 'failed', error: 'forged', caCertPem: '-----BEGIN CERTIFICATE-----\nforged\n-----END CERTIFICATE-----\n', usedDiskMb: 999_999,
        members: { '10.66.0.1': 'primary' }, convergedGeneration: 99, patchPending: true, oldestRestoreMs: 1,
        backups: [{ id: 77, label: 'forged', type: 'snapshot', createdMs: Date.now(), sizeBytes: 1, status: 'ready', target: 'primary' }],
        events: [{ id: 'forged-1', action: 'database_failover', message: 'forged by agent-b', atMs: Date.now(), status: 'notification' }],
        nodes: [{ member: 1, name: 'n1', address: '10.66.0.1', port: 3306, role: 'primary', state: 'running', replicationOk: true, gtidCurrentPos: '0-1-999999' }],
      }],
    });
    await syncB();
    expect(await row()).toEqual(before);
    expect((await api.req('GET', `${MYSQL}/${dbA.id}`)).body).toMatchObject({ status: 'active' });
    expect((await repo.backups(dbA.id)).map((b) => b.id)).not.toContain(77);
    expect((await eventsFor(api, dbA.id)).map((e) => e.message)).not.toContain('forged by agent-b');
    expect((await repo.memberReports(dbA.id)).map((r) => r.address)).not.toContain('10.66.0.1:3306');
  });

  it('an unplaced database: B reporting it as its own neither places it on B nor sends B its password', async () => {
    const password = (await repo.get(unplaced.id))!.rootPassword;
    agentB.send({ databases: [{ id: unplaced.id, status: 'active', convergedGeneration: 1 }] });
    await syncB();
    expect((await repo.get(unplaced.id))!.agentId).toBeNull();
    expect(agentB.received()).not.toContain(password);
    expect(agentB.received()).not.toContain('scope-unplaced');
  });
});
