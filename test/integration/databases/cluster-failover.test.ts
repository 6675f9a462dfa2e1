// integration-lane: concurrent (startApi on port 0 with a temp state folder; in-process scripted agents and scripted agent processes that bind nothing; the members' 127.80.0.x addresses only as data).
import { spawn, type ChildProcess } from 'node:child_process';
import { fileURLToPath } from 'node:url';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { AGENT_SILENT_MS } from '../../../control-plane/domain/databases/failover-decision.js';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { MYSQL, firstEngine, until, waitStatus } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';
import { hostCredentials } from '../../helpers/fleet.js';

/**
 * Clusters across hosts, the control plane's part (docs/databases.md, "Clusters across hosts"),
 * over real gRPC streams with three scripted agents that can run part of a cluster: a 3-node
 * cluster's members go to three agents, and when the primary's agent is gone (stream closed, or
 * open but silent) the control plane promotes the most advanced replica, raises the term, tells
 * every remaining agent and records a database_failover event.
 */
describe('a 3-node cluster over three agents', () => {
  let api: ApiHarness;
  let engine: string;
  const agents = new Map<string, ScriptedAgent>();
  const start = async (id: string) => {
    const a = startScriptedAgent(api.cp.grpcAddress, { id, region: 'us-east', membersAcrossHosts: true, credentials: await hostCredentials(api.cp, 'agent', id, 'us-east') });
    agents.set(id, a);
    return a;
  };
  /** Each agent's view of one database: its local members, the term and the named primary. */
  const views = (id: number) => [...agents.entries()].map(([agent, a]) => {
    const d = a.desired()?.databases.find((x) => Number(x.id) === id);
    return { agent, local: (d?.members ?? []).filter((m) => m.local).map((m) => m.index), term: Number(d?.term ?? 0), primary: d?.primaryMember ?? 0, members: d?.members ?? [] };
  });

  /**
   * The database's failover events, read without the harness's schema check: `database_failover`
   * is Fulcrum's own action (docs/agent.md §8), absent from the official schema's action list.
   */
  const failoverEvents = async (id: number): Promise<any[]> => {
    const res = await fetch(`${api.url}/v4/account/events`, { headers: { authorization: `Bearer ${api.token}` } });
    const body = await res.json() as { data: any[] };
    return body.data.filter((e) => e.entity?.type === 'database' && e.entity.id === id && e.action === 'database_failover');
  };

  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
    for (const id of ['agent-1', 'agent-2', 'agent-3']) await start(id);
    await until('three agents connected', async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data.filter((a: any) => a.connected && a.membersAcrossHosts).length === 3 || undefined);
  });
  afterAll(async () => {
    for (const a of agents.values()) a.close();
    await api?.close();
  });

  async function createCluster(label: string): Promise<{ id: number; primaryAgent: string }> {
    const r = await api.req('POST', MYSQL, { body: { label, region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3 } });
    expect(r.status).toBe(200);
    const id = r.body.id as number;
    await waitStatus(api, id, 'active');
    const v = await until('every agent has its member', () => {
      const all = views(id);
      return all.every((x) => x.local.length === 1) ? all : undefined;
    });
    return { id, primaryAgent: v.find((x) => x.local[0] === 1)!.agent };
  }

  it('places the three members on three different agents, each running only its own, with term 1 and member 1 primary', async () => {
    const { id } = await createCluster('spread-db');
    const v = views(id);
    expect(v.map((x) => x.local[0]).sort()).toEqual([1, 2, 3]);
    for (const x of v) {
      expect(x).toMatchObject({ term: 1, primary: 1 });
      expect(new Set(x.members.map((m) => m.agentId)).size).toBe(3);
    }
    // The API's members come from all three agents' reports, with the primary the control plane named.
    const api1 = await until('members from three agents', async () => {
      const r = await api.req('GET', `${MYSQL}/${id}`);
      return Object.keys(r.body.members).length === 3 ? r.body : undefined;
    });
    expect(api1.members).toEqual({ '127.80.0.1': 'primary', '127.80.0.2': 'failover', '127.80.0.3': 'failover' });
  });

  it('promotes the most advanced replica within seconds when the primary agent\'s stream ends, and tells the other agents', async () => {
    const { id, primaryAgent } = await createCluster('cut-db');
    const others = views(id).filter((x) => x.agent !== primaryAgent);
    // The replica of member 2 is behind the one of member 3.
    const member2Agent = others.find((x) => x.local[0] === 2)!.agent;
    agents.get(member2Agent)!.setNode(id, 2, { gtid: '0-1-5' });
    const cutAt = Date.now();
    agents.get(primaryAgent)!.close();
    agents.delete(primaryAgent);
    const after = await until('new primary named', () => {
      const v = views(id);
      return v.every((x) => x.term === 2) ? v : undefined;
    }, 15_000);
    const gap = Date.now() - cutAt;
    console.log(`primary named ${gap} ms after its agent's stream ended`);
    expect(gap).toBeLessThan(15_000);
    for (const x of after) expect(x.primary).toBe(3);
    // hosts.primary's routing reads `members`: it names the new primary at once.
    const routed = await until('members follow the new primary', async () => {
      const r = await api.req('GET', `${MYSQL}/${id}`);
      return r.body.members['127.80.0.3'] === 'primary' ? r.body.members : undefined;
    });
    expect(routed).toEqual({ '127.80.0.1': 'failover', '127.80.0.2': 'failover', '127.80.0.3': 'primary' });
    const ev = await until('failover event', async () => (await failoverEvents(id))[0]);
    expect(ev).toMatchObject({ status: 'notification', entity: { id, type: 'database' } });
    expect(ev.message).toContain('Member 3');
    expect(ev.message).toContain('term 2');
    expect(ev.message).toContain(`agent ${primaryAgent} of the primary is disconnected`);
    // The member of the gone agent stays placed there (members never move).
    expect(after[0]!.members.find((m) => m.index === 1)!.agentId).toBe(primaryAgent);
    // The agent comes back: it is told the new term and that its member is no longer primary.
    const back = await start(primaryAgent);
    const seen = await until('returning agent sees term 2', () => {
      const d = back.desired()?.databases.find((x) => Number(x.id) === id);
      return d && Number(d.term) === 2 ? d : undefined;
    });
    expect(seen.primaryMember).toBe(3);
    expect(seen.members.filter((m) => m.local).map((m) => m.index)).toEqual([1]);
  });

  it('counts an open but silent primary agent as gone (a cut link before keepalive fires)', async () => {
    const { id, primaryAgent } = await createCluster('silent-db');
    const silentAt = Date.now();
    agents.get(primaryAgent)!.mute(true);
    const after = await until('new primary named', () => {
      const v = views(id).filter((x) => x.agent !== primaryAgent);
      return v.every((x) => x.term === 2) ? v : undefined;
    }, 20_000);
    console.log(`primary named ${Date.now() - silentAt} ms after its agent fell silent`);
    expect(after.every((x) => x.primary !== 1)).toBe(true);
    const ev = await until('failover event', async () => (await failoverEvents(id))[0]);
    expect(ev.message).toContain('has not reported');
    agents.get(primaryAgent)!.mute(false);
  });

  it('does not fail over a healthy cluster whose agents keep reporting', async () => {
    const { id } = await createCluster('calm-db');
    await new Promise((r) => setTimeout(r, 4000));
    expect(views(id).every((x) => x.term === 1)).toBe(true);
    expect(await failoverEvents(id)).toEqual([]);
  });
});

/**
 * A frozen primary agent (SIGSTOP: its connection stays open, nothing answers, as on a host cut
 * off the network): the control plane's keepalive drops the stream in seconds, well before the
 * report gap would (AGENT_SILENT_MS), and the failover follows.
 */
describe('a frozen primary agent process', () => {
  let api: ApiHarness;
  const children: ChildProcess[] = [];
  const spawnAgent = async (id: string): Promise<ChildProcess> => {
    const child = spawn(process.execPath, ['--import', 'tsx', fileURLToPath(new URL('./scripted-agent-main.ts', import.meta.url)), api.cp.grpcAddress, id, 'us-east'], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(child);
    await new Promise<void>((resolve, reject) => {
      child.stdout!.once('data', () => resolve());
      child.once('exit', (code) => reject(new Error(`scripted agent ${id} exited with ${code}`)));
    });
    return child;
  };
  beforeAll(async () => {
    api = await startApi({ insecureGrpc: true });
  });
  afterAll(async () => {
    for (const c of children) {
      c.kill('SIGCONT');
      c.kill('SIGKILL');
    }
    await api?.close();
  });

  it('is noticed by keepalive within a few seconds and its replica is promoted', async () => {
    const engine = await firstEngine(api);
    const procs = new Map<string, ChildProcess>();
    for (const id of ['frozen-1', 'frozen-2', 'frozen-3']) procs.set(id, await spawnAgent(id));
    await until('three agents connected', async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data.filter((a: any) => a.connected && a.membersAcrossHosts).length === 3 || undefined);
    const r = await api.req('POST', MYSQL, { body: { label: 'frozen-db', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3 } });
    await waitStatus(api, r.body.id, 'active');
    // Placement ties go by agent id, so member 1 (the first primary) is on frozen-1.
    const primaryAgent = 'frozen-1';
    procs.get(primaryAgent)!.kill('SIGSTOP');
    const frozenAt = Date.now();
    await until('frozen agent dropped', async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data.find((a: any) => a.id === primaryAgent).connected === false || undefined, 15_000);
    const noticed = Date.now() - frozenAt;
    console.log(`frozen agent's stream dropped ${noticed} ms after SIGSTOP`);
    expect(noticed).toBeLessThan(AGENT_SILENT_MS);
    const waitEvent = async () => {
      const body = await (await fetch(`${api.url}/v4/account/events`, { headers: { authorization: `Bearer ${api.token}` } })).json() as { data: any[] };
      return body.data.find((e) => e.action === 'database_failover' && e.entity?.id === r.body.id);
    };
    const ev = await until('failover event', waitEvent, 15_000);
    console.log(`replica promoted ${Date.now() - frozenAt} ms after SIGSTOP`);
    expect(ev.message).toContain(`agent ${primaryAgent} of the primary is disconnected`);
  });
});
