import { afterAll, beforeAll, describe, expect, it, onTestFailed } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { createProcessRuntime } from '../../agent/runtime/process-runtime.js';
import { silentLogger } from '../../lib/logger.js';
import { CONNECT_TIMEOUT_MS } from '../../lib/control-plane-client.js';
import { claimOctet, type OctetClaim } from '../helpers/address-blocks.js';
import { api, until } from '../helpers/lab.js';
import { startPgCluster, type PgCluster } from '../helpers/postgres.js';
import { attemptLog, copyReplicaKeys, logLines, metricValue, startProc, startReplica, type Proc, type ReplicaProc } from '../helpers/replica-procs.js';
import { ask, echoBackend, freePort } from '../helpers/tcp.js';
import type { TcpBackend } from '../helpers/backends.js';

// Two control-plane replicas as real processes on one PostgreSQL store; a data plane (serving a
// NodeBalancer and a database endpoint) and an agent (a process-runtime database) list replica A
// first and connect to it. A is SIGKILLed: both are on replica B within 5 s (printed), the data
// plane kept every listener (a loop of new connections through the NodeBalancer and through the
// database's hosts.primary sees no failure, and no snapshot it applied removed or lost a
// listener). Then A returns and B is frozen (SIGSTOP, like a host that vanished): the hosts are
// back on A within their keepalive bound, again closing nothing. docs/architecture.md, "The streams".

const MOVE_LIMIT_MS = 5_000;
/**
 * A replica that stops answering without closing anything (a frozen process, a vanished host) is
 * noticed by the hosts' keepalive (lib/grpc.ts: a ping after 10 s, 5 s to answer), then one
 * attempt moves them (docs/architecture.md, "The streams").
 */
const FROZEN_LIMIT_MS = 10_000 + 5_000 + 3_000;
/**
 * After an outage of every replica but a frozen one: the backoff cap (lib/backoff.ts), plus one
 * attempt abandoned on the frozen replica (CONNECT_TIMEOUT_MS), plus one attempt that holds.
 */
const RETURN_LIMIT_MS = 10_125 + CONNECT_TIMEOUT_MS + 3_000;
/**
 * This file's own addresses, held host-wide (test/helpers/address-blocks.ts): other tests and
 * labs run on the host meanwhile, in the e2e lane beside this one among others.
 */
let claim: OctetClaim | undefined;
let octet = 0;

interface LoopStats {
  served: number;
  failures: { atMs: number; error: string }[];
}

/** Runs `once` back to back (with `gapMs` between) until stopped, counting answers and failures. */
function loop(once: () => Promise<void>, gapMs: number) {
  const stats: LoopStats = { served: 0, failures: [] };
  let running = true;
  const done = (async () => {
    while (running) {
      try {
        await once();
        stats.served++;
      } catch (err) {
        stats.failures.push({ atMs: Date.now(), error: (err as Error).message });
      }
      await new Promise((r) => setTimeout(r, gapMs));
    }
  })();
  return {
    stats,
    async stop() {
      running = false;
      await done;
      return stats;
    },
  };
}

describe('a control-plane replica is SIGKILLed', () => {
  let pgc: PgCluster | undefined;
  const dir = mkdtempSync(join(tmpdir(), 'harc-loss-'));
  const [stateA, stateB, dpState, agentState] = ['cp-a', 'cp-b', 'dp', 'agent'].map((d) => join(dir, d));
  let a: ReplicaProc | undefined;
  let b: ReplicaProc | undefined;
  let dp: Proc | undefined;
  let agent: Proc | undefined;
  let backend: TcpBackend | undefined;

  beforeAll(async () => {
    claim = await claimOctet();
    octet = claim.octet;
    pgc = await startPgCluster();
  }, 300_000);

  afterAll(async () => {
    // A frozen replica takes no signal but SIGKILL until it runs again.
    for (const r of [a, b]) if (r && !r.exited()) r.proc.kill('SIGCONT');
    await agent?.stop();
    await dp?.stop();
    await b?.stop();
    await a?.stop('SIGKILL');
    await backend?.close();
    // Whatever a failed run left behind: every node of this agent goes.
    const rt = createProcessRuntime({ root: join(agentState, 'runtime'), logger: silentLogger() });
    for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
    await rt.close();
    await pgc?.stop();
    rmSync(dir, { recursive: true, force: true });
    await claim?.release();
  }, 120_000);

  it('moves the data plane and the agent to the other replica within 5 s of a SIGKILL, within the keepalive bound of a freeze, and past a frozen replica to one that returns, closing no listener', async () => {
    onTestFailed(() => {
      for (const p of [a, b, dp, agent]) if (p) console.log(`[${p.name}]\n${p.log.slice(-60).join('\n')}`);
    });
    const store = await pgc!.newDatabase();
    const [grpcA, bootA, grpcB, bootB] = [await freePort(), await freePort(), await freePort(), await freePort()];
    const cpArgs = ['--nodebalancer-pool', `127.77.${octet}.0/24`, '--database-pool', `127.78.${octet}.0/24`,
      '--backend-networks', '127.0.0.0/8', '--backend-exclude', '127.79.0.0/16'];
    a = await startReplica('replica-a', { stateDir: stateA, store, grpcPort: grpcA, bootstrapPort: bootA, args: cpArgs });
    // B shares A's key file, fleet CA and admin token (docs/install.md, "PostgreSQL").
    copyReplicaKeys(stateA, stateB);
    b = await startReplica('replica-b', { stateDir: stateB, store, grpcPort: grpcB, bootstrapPort: bootB, args: cpArgs });
    const viaA = api(a.apiUrl, a.adminToken);
    const viaB = api(b.apiUrl, b.adminToken);

    // A first in both lists: they join through A and hold their streams there.
    const list = `${a.grpcAddress},${b.grpcAddress}`;
    const token = async (role: string, id: string) => {
      const r = await viaA('POST', '/v4/fulcrum/join-tokens', { role, id, region: '*' });
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      return r.body.token as string;
    };
    dp = startProc('dataplane', ['dataplane', '--id', 'harc-dp', '--region', '*', '--control-plane', list, '--state', dpState, '--workers', '1',
      '--endpoint-source', `127.76.${octet}.1`, '--join', await token('dataplane', 'harc-dp')]);
    agent = startProc('agent', ['agent', '--id', 'harc-agent', '--region', '*', '--control-plane', list, '--state', agentState, '--runtime', 'process',
      '--node-pool', `127.79.${octet}.0/24`, '--stop-nodes-on-exit', '--join', await token('agent', 'harc-agent')]);
    // Which hosts hold a stream on a replica: its own open-stream gauges (not the stored status,
    // which any replica writes).
    const onReplica = async (r: ReplicaProc) => ({
      dp: await metricValue(r.metricsUrl, 'fulcrum_dataplanes_connected'),
      agent: await metricValue(r.metricsUrl, 'fulcrum_agents_connected'),
    });
    await until('both hosts on A', async () => {
      const n = await onReplica(a!);
      return n.dp === 1 && n.agent === 1;
    }, 90_000, 100);
    expect(await onReplica(b)).toEqual({ dp: 0, agent: 0 });

    // A NodeBalancer written through A, a database through B.
    backend = await echoBackend(`127.74.${octet}.1`, 'harc');
    const nb = await viaA('POST', '/v4/nodebalancers', {
      region: 'us-east', label: 'harc-nb', configs: [{ port: 7300, protocol: 'tcp', nodes: [{ label: 'echo', address: `127.74.${octet}.1:${backend.port}` }] }],
    });
    expect(nb.status, JSON.stringify(nb.body)).toBe(200);
    const nbIp = nb.body.ipv4 as string;
    await until('traffic through the NodeBalancer', () => ask(nbIp, 7300, 'a').then((s) => s === 'harc:a'), 30_000, 100);
    const engine = (await viaB('GET', '/v4/databases/engines')).body.data[0].id as string;
    const created = await viaB('POST', '/v4/databases/mysql/instances', {
      label: 'harc-db', region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['127.0.0.0/8'],
    });
    expect(created.status, JSON.stringify(created.body)).toBe(200);
    const dbId = created.body.id as number;
    const db = await until('database active', async () => {
      const r = (await viaB('GET', `/v4/databases/mysql/instances/${dbId}`)).body;
      if (r.status === 'failed') throw new Error('database failed');
      return r.status === 'active' ? r : undefined;
    }, 300_000, 250);
    const { password } = (await viaB('GET', `/v4/databases/mysql/instances/${dbId}/credentials`)).body;
    const ca = Buffer.from((await viaB('GET', `/v4/databases/mysql/instances/${dbId}/ssl`)).body.ca_certificate, 'base64').toString();
    const query = async () => {
      // A new connection each time: a closed listener would refuse it.
      const c = await mysql.createConnection({
        stream: connect({ host: db.hosts.primary, port: db.port, localAddress: `127.73.${octet}.1` }),
        user: 'linroot', password, connectTimeout: 3000, ssl: { ca, rejectUnauthorized: true },
      });
      try {
        await c.query('SELECT 1');
      } finally {
        await c.end();
      }
    };
    await until('hosts.primary answers', () => query().then(() => true), 60_000, 250);
    const applied = (since: number) => logLines(dp!, since, /snapshot applied/) as unknown as { listeners: number; removed: number; databaseEndpoints: number }[];
    const before = applied(0).at(-1)!;
    expect(before.listeners).toBeGreaterThanOrEqual(1);
    expect(before.databaseEndpoints).toBeGreaterThanOrEqual(1);

    /**
     * Loses a replica by `lose`, while new connections go through the NodeBalancer and hosts.primary,
     * and measures when both hosts hold a stream on `to`; prints the times and the hosts' attempts.
     */
    const move = async (what: string, lose: () => Promise<number | void>, target: () => ReplicaProc, limitMs: number) => {
      const nbLoop = loop(async () => {
        if ((await ask(nbIp, 7300, 'x')) !== 'harc:x') throw new Error('wrong answer');
      }, 20);
      const dbLoop = loop(query, 50);
      await new Promise((r) => setTimeout(r, 1000));
      const lost = Date.now();
      // Measured from the loss, or from the moment `lose` returns (a replica's return).
      const from = (await lose()) ?? lost;
      const to = target();
      const moved: { dp?: number; agent?: number } = {};
      await until(`both hosts on ${to.name}`, async () => {
        const n = await onReplica(to);
        const t = Date.now() - from;
        if (n.dp === 1) moved.dp ??= t;
        if (n.agent === 1) moved.agent ??= t;
        return moved.dp !== undefined && moved.agent !== undefined;
      }, limitMs + 30_000, 25);
      // The loops go on a while on the new replica before they are counted.
      await new Promise((r) => setTimeout(r, 1500));
      const nbStats = await nbLoop.stop();
      const dbStats = await dbLoop.stop();

      process.stdout.write(`${what}; on ${to.name} after: data plane ${moved.dp} ms, agent ${moved.agent} ms (limit ${limitMs} ms)\n`);
      process.stdout.write(`  through the NodeBalancer ${nbStats.served} connections served, ${nbStats.failures.length} failed; `
        + `through hosts.primary ${dbStats.served} served, ${dbStats.failures.length} failed\n`);
      process.stdout.write(`  data plane attempts:\n    ${attemptLog(dp!, lost).join('\n    ')}\n  agent attempts:\n    ${attemptLog(agent!, lost).join('\n    ')}\n`);
      const hellos = logLines(to, lost, /^(data plane|agent) connected$/).map((j) => `+${((j.time - lost) / 1000).toFixed(2)}s ${j.msg}`);
      process.stdout.write(`  ${to.name} saw the hellos:\n    ${hellos.join('\n    ')}\n`);
      for (const f of [...nbStats.failures, ...dbStats.failures]) process.stdout.write(`  failure at +${f.atMs - lost} ms: ${f.error}\n`);

      expect(moved.dp).toBeLessThanOrEqual(limitMs);
      expect(moved.agent).toBeLessThanOrEqual(limitMs);
      expect(nbStats.failures).toEqual([]);
      expect(dbStats.failures).toEqual([]);
      expect(nbStats.served).toBeGreaterThan(20);
      expect(dbStats.served).toBeGreaterThan(5);
      // Whatever the new replica sent was applied without losing a listener or an endpoint.
      for (const s of applied(lost)) {
        expect(s.removed).toBe(0);
        expect(s.listeners).toBeGreaterThanOrEqual(before.listeners);
        expect(s.databaseEndpoints).toBe(before.databaseEndpoints);
      }
      expect(await onReplica(to)).toEqual({ dp: 1, agent: 1 });
    };

    await move('replica A SIGKILLed', () => a!.stop('SIGKILL'), () => b!, MOVE_LIMIT_MS);

    // A returns on its ports; the hosts stay on B, which is then frozen (SIGSTOP: its sockets
    // stay open and nothing answers, as when its host vanishes). They move back to A.
    a = await startReplica('replica-a', { stateDir: stateA, store, grpcPort: grpcA, bootstrapPort: bootA, args: cpArgs });
    expect(await onReplica(a)).toEqual({ dp: 0, agent: 0 });
    expect(await onReplica(b)).toEqual({ dp: 1, agent: 1 });
    await move('replica B frozen', async () => {
      b!.proc.kill('SIGSTOP');
    }, () => a!, FROZEN_LIMIT_MS);

    // A is SIGKILLed too while B stays frozen, and returns 15 s later. Meanwhile the hosts' next
    // replica is B, whose kernel accepts TCP but whose process never answers TLS: each attempt
    // there is abandoned after CONNECT_TIMEOUT_MS (grpc-js alone would wait for ever), so once A
    // is back they reach it within the backoff cap plus that timeout plus one attempt.
    await move('replica A SIGKILLed with B frozen, A back 15 s later', async () => {
      await a!.stop('SIGKILL');
      await new Promise((r) => setTimeout(r, 15_000));
      a = await startReplica('replica-a', { stateDir: stateA, store, grpcPort: grpcA, bootstrapPort: bootA, args: cpArgs });
      return Date.now();
    }, () => a!, RETURN_LIMIT_MS);
  }, 600_000);
});
