// integration-lane: concurrent (usePgReplicas: its own PostgreSQL on a free port and temp folders, control-plane replicas on port 0, scripted agents that bind nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../../control-plane/main.js';
import { api } from '../../helpers/lab.js';
import { waitFor } from '../../helpers/backends.js';
import { startScriptedAgent, type ScriptedAgent } from '../databases/scripted-agent.js';
import { usePgReplicas } from './pg-replicas.js';

const MYSQL = '/v4/databases/mysql/instances';

/**
 * The failover of a cluster spread over agents is decided by the replica holding the lease
 * (docs/architecture.md, "Replicas on one PostgreSQL store"), from the member reports in the store
 * (docs/databases.md, "Clusters across hosts"): here every agent reports to the other replica,
 * so the holder has no agent of its own and still promotes the most advanced replica.
 */
describe('failover decided by the lease holder from agents connected to another replica', () => {
  const replicas = usePgReplicas('hbl-fo');
  const cps: ControlPlane[] = [];
  const agents = new Map<string, ScriptedAgent>();

  beforeAll(async () => {
    for (let i = 0; i < 2; i++) cps.push(await replicas.start());
  }, 180_000);
  // Runs before the fixture's afterAll closes the replicas (vitest runs afterAll hooks in reverse).
  afterAll(() => {
    for (const a of agents.values()) a.close();
  });

  it('promotes the most advanced replica when the primary\'s agent goes, with no agent on the holder', async () => {
    const holder = await waitFor(() => {
      const h = cps.filter((cp) => cp.context.replicas.leaseHeld());
      return h.length === 1 ? h[0] : undefined;
    }, 20_000, 'one lease holder');
    const other = cps.find((cp) => cp !== holder)!;
    for (const id of ['hbl-fo-1', 'hbl-fo-2', 'hbl-fo-3']) {
      agents.set(id, startScriptedAgent(other.grpcAddress, { id, region: 'us-east', membersAcrossHosts: true, heartbeatMs: 300 }));
    }
    const viaHolder = api(holder.apiUrl, holder.adminToken);
    await waitFor(async () => ((await viaHolder('GET', '/v4/fulcrum/agents')).body.data as any[]).filter((a) => a.connected && a.membersAcrossHosts).length === 3, 20_000, 'three agents');
    const engine = ((await viaHolder('GET', '/v4/databases/engines')).body.data as { id: string }[])[0]!.id;
    const made = await viaHolder('POST', MYSQL, { label: 'hbl-fo-db', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3 });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    const id = made.body.id as number;
    await waitFor(async () => (await viaHolder('GET', `${MYSQL}/${id}`)).body.status === 'active', 30_000, 'active');
    const localOf = (agent: ScriptedAgent) => agent.desired()?.databases.find((d) => Number(d.id) === id)?.members.find((m) => m.local)?.index;
    await waitFor(() => [...agents.values()].every((a) => localOf(a) !== undefined), 20_000, 'members placed');
    const byMember = new Map([...agents.entries()].map(([name, a]) => [localOf(a)!, name]));
    // Member 2's replica is behind member 3's: the decision needs both agents' reports.
    agents.get(byMember.get(2)!)!.setNode(id, 2, { gtid: '0-1-5' });
    await waitFor(async () => (await holder.context.store.databases.memberReports(id)).find((r) => r.member === 2)?.gtid === '0-1-5', 10_000, 'lagging report stored');
    expect(holder.context.replicas.leaseHeld()).toBe(true);

    const primaryAgent = byMember.get(1)!;
    agents.get(primaryAgent)!.close();
    agents.delete(primaryAgent);
    const promoted = await waitFor(async () => {
      const d = (await viaHolder('GET', `${MYSQL}/${id}`)).body;
      return d.members?.['127.80.0.3'] === 'primary' ? d : undefined;
    }, 30_000, 'member 3 promoted');
    expect(promoted.members['127.80.0.2']).toBe('failover');
    const row = await holder.context.store.databases.get(id);
    expect(row).toMatchObject({ term: 2, primaryMember: 3 });
    // The agents on the other replica are told the new term and primary.
    await waitFor(() => [...agents.values()].every((a) => {
      const d = a.desired()?.databases.find((x) => Number(x.id) === id);
      return Number(d?.term) === 2 && d?.primaryMember === 3;
    }), 10_000, 'agents told');
  }, 120_000);
});
