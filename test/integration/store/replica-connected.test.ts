import pg from 'pg';
import { afterAll, describe, expect, it } from 'vitest';
import type { ControlPlane } from '../../../control-plane/main.js';
import { api, until } from '../../helpers/lab.js';
import { startScriptedAgent, type ScriptedAgent } from '../databases/scripted-agent.js';
import { scriptedDataplane as dataplane, usePgReplicas } from './pg-replicas.js';

/** Waits for `fn` to hold, asking every 250 ms (the API's rate limit stays far away). */
const waitFor = (fn: () => Promise<boolean>, timeoutMs: number) => until('condition', async () => ((await fn()) ? true : undefined), timeoutMs, 250);

/**
 * The API's `connected` with two replicas on one PostgreSQL database (docs/architecture.md, "The
 * streams"): each host records the replica holding its stream, so a replica that starts leaves
 * the other's hosts alone, and the hosts of a replica whose heartbeat stopped read disconnected.
 */
describe('connected hosts with two control-plane replicas', () => {
  const replicas = usePgReplicas('haconn');
  let a: ControlPlane | undefined;
  let b: ControlPlane | undefined;
  const hosts: { close(): void }[] = [];

  // Runs before the fixture's afterAll closes the replicas (vitest runs afterAll hooks in reverse).
  afterAll(() => {
    for (const h of hosts) h.close();
  });

  /** `connected` and `replica` of every data plane and agent, as one replica's API answers. */
  const status = async (cp: ControlPlane) => {
    const call = api(cp.apiUrl, cp.adminToken);
    const [d, g] = [await call('GET', '/v4/fulcrum/dataplanes'), await call('GET', '/v4/fulcrum/agents')];
    if (d.status !== 200 || g.status !== 200) throw new Error(`status lists answered ${d.status} and ${g.status}`);
    const dps = d.body.data as { id: string; connected: boolean; replica: string }[];
    const agents = g.body.data as { id: string; connected: boolean; replica: string }[];
    return Object.fromEntries([...dps, ...agents].map((h) => [h.id, { connected: h.connected, replica: h.replica }]));
  };
  const sql = async (q: string, params: unknown[]) => {
    const c = new pg.Client({ connectionString: replicas.url });
    await c.connect();
    try {
      return (await c.query(q, params)).rows;
    } finally {
      await c.end();
    }
  };
  /** Runs the statements in one transaction; returns how many rows each touched. */
  const sqlTx = async (statements: [string, unknown[]][]) => {
    const c = new pg.Client({ connectionString: replicas.url });
    await c.connect();
    try {
      await c.query('BEGIN');
      const counts: (number | null)[] = [];
      for (const [q, params] of statements) counts.push((await c.query(q, params)).rowCount);
      await c.query('COMMIT');
      return counts;
    } finally {
      await c.end();
    }
  };
  const heartbeatOf = async (id: string) => (await sql('SELECT heartbeat_at FROM control_plane_replicas WHERE id = $1', [id]))[0]?.heartbeat_at as string | undefined;

  it('replica B starting leaves the hosts connected to A connected; A taken for dead while alive records them again; once A\'s heartbeat stops they read disconnected, B\'s own stay', async () => {
    a = await replicas.start();
    const idA = a.context.replicas.id;
    expect(idA).not.toBe('');
    hosts.push(dataplane(a.grpcAddress, 'haconn-dp-a'));
    // No heartbeat of its own: it writes only when it gets a desired state, so a wrong clear would stay.
    const agentA: ScriptedAgent = startScriptedAgent(a.grpcAddress, { id: 'haconn-agent-a', region: 'us-east' });
    hosts.push(agentA);
    const onA = { connected: true, replica: idA };
    await waitFor(async () => {
      const s = await status(a!);
      return s['haconn-dp-a']?.connected === true && s['haconn-agent-a']?.connected === true;
    }, 20_000);

    b = await replicas.start();
    const idB = b.context.replicas.id;
    expect(idB).not.toBe(idA);
    // B has started, cleared what it held and swept at least once: two heartbeats of B recorded.
    await waitFor(async () => (await heartbeatOf(idB)) !== undefined, 20_000);
    const first = await heartbeatOf(idB);
    await waitFor(async () => (await heartbeatOf(idB)) !== first, 20_000);
    for (let i = 0; i < 6; i++) {
      const [viaA, viaB] = [await status(a), await status(b)];
      expect(viaB['haconn-dp-a']).toEqual(onA);
      expect(viaB['haconn-agent-a']).toEqual(onA);
      expect(viaA['haconn-dp-a']).toEqual(onA);
      await new Promise((r) => setTimeout(r, 500));
    }

    // A taken for dead while alive (what B's sweep does to a replica whose beats are late): A's
    // next beat finds itself forgotten and records its open streams as connected again. One
    // transaction, as the sweep's: a beat of A between forgetting it and clearing its hosts would
    // find itself forgotten, record its hosts, and the clear after it would then stand for good.
    // A's beat can come right after the commit, so what the clear did is counted here rather
    // than read back through the API.
    const cleared = await sqlTx([
      ['DELETE FROM control_plane_replicas WHERE id = $1', [idA]],
      ['UPDATE dataplanes SET connected = 0 WHERE connected = 1 AND replica = $1', [idA]],
      ['UPDATE database_agents SET connected = 0 WHERE connected = 1 AND replica = $1', [idA]],
    ]);
    expect(cleared).toEqual([1, 1, 1]);
    await waitFor(async () => {
      const s = await status(b!);
      return s['haconn-dp-a']?.connected === true && s['haconn-agent-a']?.connected === true;
    }, 30_000);
    expect((await status(b))['haconn-dp-a']).toEqual(onA);

    hosts.push(dataplane(b.grpcAddress, 'haconn-dp-b'));
    await waitFor(async () => (await status(b!))['haconn-dp-b']?.connected === true, 20_000);

    // A stops beating while its streams stay open and it writes nothing (as a SIGKILLed or frozen
    // replica leaves its rows): after the dead-replica time B's sweep clears A's hosts only.
    agentA.mute(true);
    await a.context.replicas.close();
    // Measured from A's last recorded beat, not from the close: a beat slow to write (a loaded
    // store) records the time it started, so that beat can be seconds old when A closes.
    const lastBeat = Number(await heartbeatOf(idA));
    expect(lastBeat).toBeGreaterThan(0);
    await waitFor(async () => {
      const s = await status(b!);
      return s['haconn-dp-a']?.connected === false && s['haconn-agent-a']?.connected === false;
    }, 40_000);
    // Not before A's last beat is 10 s old (the heartbeat's dead-replica time).
    expect(Date.now() - lastBeat).toBeGreaterThanOrEqual(10_000);
    const after = await status(b);
    expect(after['haconn-dp-b']).toEqual({ connected: true, replica: idB });
    expect(await heartbeatOf(idA)).toBeUndefined();
  }, 150_000);
});
