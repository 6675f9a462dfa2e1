import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, existsSync, readdirSync } from 'node:fs';
import { enrolHost } from '../../helpers/fleet.js';
import { connect as netConnect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import mysql from 'mysql2/promise';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { startDataplane, type Dataplane, type DataplaneOptions } from '../../../dataplane/main.js';
import { silentLogger } from '../../../lib/logger.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { createDockerRuntime } from '../../../agent/runtime/docker-runtime.js';
import type { ContainerRuntime } from '../../../agent/runtime/container-runtime.js';
import { apiCalls, repoRoot, testRateLimits, until } from '../../helpers/lab.js';
import { claimOctet, type OctetClaim } from '../../helpers/address-blocks.js';

export { until };
export const MYSQL = '/v4/databases/mysql/instances';

/**
 * An e2e lab for Managed Databases: the control plane in-process (port 0, temp state, its own
 * /24 of endpoint addresses), a data plane in-process that serves the endpoints (mutual TLS,
 * dialling members from its own 127.76 address), and the agent as a separate OS process
 * (agent-process.ts, the same startAgent as `fulcrum agent`, with its own /24 of node addresses),
 * so that it can really be killed (SIGKILL) and started again.
 */
export interface DbLab {
  cp: ControlPlane;
  dataplane: Dataplane;
  runtime: RuntimeKind;
  agentDir: string;
  agentId: string;
  api<T = any>(method: string, path: string, body?: unknown): Promise<{ status: number; body: T }>;
  startAgent(): Promise<void>;
  killAgent(): Promise<void>;
  agentPid(): number | undefined;
  /** Node processes (pids) the process runtime knows for this agent's state folder. */
  nodes(): Promise<{ name: string; ref: string; state: string; host: string; memoryMb: number; cpus: number }[]>;
  output(): string;
  close(): Promise<void>;
}

export type RuntimeKind = 'process' | 'docker';

/** How much of the agent's output a lab keeps (the newest), for a failed wait to print. */
const OUTPUT_KEPT = 400_000;

/**
 * A third octet (100-249) for a file's own 127.76/127.78/127.79 blocks, held host-wide until
 * `release` (test/helpers/address-blocks.ts): no other lab, lane or checkout on this host gets it
 * meanwhile.
 */
export const ownOctet = (): Promise<OctetClaim> => claimOctet(100, 249);

/**
 * `dataplane`: options for the data plane (its workers, for one: `workers` > 1 forks worker
 * processes of `fulcrum dataplane`, which a test may stop; this process stays their primary).
 */
export interface DbLabOptions {
  dataplane?: Pick<DataplaneOptions, 'workers' | 'workerApplyTimeoutMs' | 'workerHeartbeat'>;
}

export async function startDbLab(name: string, runtimeKind: RuntimeKind = 'process', opts: DbLabOptions = {}): Promise<DbLab> {
  const stateDir = mkdtempSync(join(tmpdir(), `fulcrum-${name}-cp-`));
  const agentDir = mkdtempSync(join(tmpdir(), `fulcrum-${name}-agent-`));
  const dpDir = mkdtempSync(join(tmpdir(), `fulcrum-${name}-dp-`));
  // Own /24s for endpoints and nodes: other agents and labs may run on this host meanwhile.
  const claim = await ownOctet();
  const { octet } = claim;
  const pool = `127.78.${octet}.0/24`;
  const nodePool = `127.79.${octet}.0/24`;
  // Status polls every 100 ms for minutes: past the product's per-token limit (helpers/lab.ts).
  const cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, databasePool: pool, logger: silentLogger(), rateLimits: testRateLimits });
  // The octet in the name too: the docker runtime names containers after the agent, and the same
  // file run from two checkouts at once would otherwise replace each other's containers.
  const agentId = `e2e-${name}-${octet}`;
  await enrolHost(cp, dpDir, 'dataplane', `${agentId}-dp`, 'us-east');
  const dataplane = await startDataplane({
    controlPlane: cp.grpcAddress, stateDir: dpDir, logger: silentLogger(), endpointSource: `127.76.${octet}.1`, telemetryIntervalMs: 500, ...opts.dataplane,
  });
  let child: ChildProcess | undefined;
  let out = '';

  const runtimeFor = (): ContainerRuntime => runtimeKind === 'docker'
    ? createDockerRuntime({ root: join(agentDir, 'runtime'), logger: silentLogger() })
    : createProcessRuntime({ root: join(agentDir, 'runtime'), logger: silentLogger() });

  const { api } = apiCalls(cp.apiUrl, cp.adminToken);

  const lab: DbLab = {
    cp, dataplane, runtime: runtimeKind, agentDir, agentId, api,
    async startAgent() {
      if (!existsSync(join(agentDir, 'pki', 'host.crt'))) await enrolHost(cp, agentDir, 'agent', agentId, 'us-east');
      child = spawn(process.execPath, ['--import', 'tsx', join(repoRoot, 'test', 'e2e', 'databases', 'agent-process.ts'), agentId, 'us-east',
        cp.grpcAddress, agentDir, runtimeKind, nodePool], {
        cwd: repoRoot,
        // Info: what the agent did (each action, its time) is what explains a wait that ran out.
        env: { ...process.env, FULCRUM_FROM_SOURCE: '1', FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'info' },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      child.stdout!.on('data', (b) => { out = (out + b).slice(-OUTPUT_KEPT); });
      child.stderr!.on('data', (b) => { out = (out + b).slice(-OUTPUT_KEPT); });
      // The agent starts from the TypeScript sources (tsx): on a busy 2-core machine with other
      // e2e files running beside this one that took over 30 s. Wait long, but stop at once with
      // its output if the process died.
      const died = new Promise<never>((_, reject) => child!.once('exit', (code, signal) =>
        reject(new Error(`agent exited (${code ?? signal}) before it connected: ${out.slice(-2000)}`))));
      died.catch(() => undefined); // a later exit (killAgent) is no error; the race below reports an early one
      await Promise.race([
        until('agent connected', async () => (await api('GET', '/v4/fulcrum/agents')).body.data.some((a: any) => a.id === agentId && a.connected) || undefined, 120_000, 100),
        died,
      ]);
    },
    async killAgent() {
      const c = child;
      if (!c || c.exitCode !== null) return;
      const exited = new Promise((r) => c.once('exit', r));
      c.kill('SIGKILL');
      await exited;
      child = undefined;
    },
    agentPid: () => child?.pid,
    async nodes() {
      const rt = runtimeFor();
      try {
        return (await rt.list({})).map((n) => ({
          name: n.name, ref: String(n.ref), state: n.state, host: n.spec?.host ?? '', memoryMb: n.spec?.memoryMb ?? 0, cpus: n.spec?.cpus ?? 0,
        }));
      } finally {
        await rt.close();
      }
    },
    output: () => out,
    async close() {
      await lab.killAgent();
      // Whatever a failed test left behind: every node of this agent goes.
      const rt = runtimeFor();
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      await rt.close();
      await dataplane.close();
      await cp.close();
      rmSync(stateDir, { recursive: true, force: true });
      rmSync(dpDir, { recursive: true, force: true });
      rmSync(agentDir, { recursive: true, force: true });
      await claim.release();
    },
  };
  return lab;
}

export async function waitStatus(lab: DbLab, id: number, status: string, timeoutMs = 60_000): Promise<any> {
  return until(`database ${id} ${status}`, async () => {
    const r = await lab.api('GET', `${MYSQL}/${id}`);
    if (r.body.status === 'failed' && status !== 'failed') {
      // Say why: the newest failed event of this database carries the agent's reason.
      const ev = await lab.api('GET', '/v4/account/events?page_size=100');
      const why = (ev.body.data ?? []).find((e: any) => e.entity?.id === id && e.status === 'failed');
      throw new Error(`database ${id} failed${why ? `: ${why.action}: ${why.message ?? ''}` : ''}`);
    }
    return r.body.status === status ? r.body : undefined;
  }, timeoutMs, 100).catch((err: Error) => {
    if (!/^timed out/.test(err.message)) throw err;
    // A wait that ran out says what the agent did meanwhile: its lines about this database, and
    // every warning or error.
    const lines = lab.output().split('\n').filter((l) => l.includes(`"database":${id},`) || /"level":(40|50|60)/.test(l)).slice(-60);
    throw new Error(`${err.message}; the agent's last lines about it:\n${lines.join('\n')}`);
  });
}

/** A mysql2 connection from a chosen source address; TLS verified against `ca` when given. */
export async function connectFrom(o: { source: string; host: string; port: number; user: string; password: string; ca?: string; timeoutMs?: number }): Promise<mysql.Connection> {
  const sock = netConnect({ host: o.host, port: o.port, localAddress: o.source });
  return mysql.createConnection({
    stream: sock, host: o.host, port: o.port, user: o.user, password: o.password, connectTimeout: o.timeoutMs ?? 3000,
    ...(o.ca ? { ssl: { ca: o.ca, rejectUnauthorized: true } } : {}),
  });
}

/** Resolves to the error of a connection attempt, or null when it connected. */
export async function refusal(o: Parameters<typeof connectFrom>[0]): Promise<Error | null> {
  try {
    const c = await connectFrom(o);
    await c.query('SELECT 1');
    await c.end();
    return null;
  } catch (e) {
    return e as Error;
  }
}

/** Whether something listens on ip:port. */
export function listening(ip: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = netConnect({ host: ip, port });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => resolve(false));
  });
}

export function dirEntries(dir: string): string[] {
  return existsSync(dir) ? readdirSync(dir) : [];
}

/**
 * Inserts `perSecond` rows per second through `host` (reconnecting after errors) and records
 * which ids were acknowledged and the longest stretch of failures.
 */
/** Each writer's ids start in a range of their own: two writers on one table never collide. */
let writerSeq = 0;

export function startWriter(o: { host: string; password: string; ca: string; table: string; perSecond?: number; source?: string }) {
  const acked: number[] = [];
  const errors: string[] = [];
  let next = 1_000_000 * ++writerSeq;
  let conn: mysql.Connection | undefined;
  let failingSince: number | undefined;
  let longestOutageMs = 0;
  let stopped = false;
  const every = 1000 / (o.perSecond ?? 20);
  const loop = (async () => {
    while (!stopped) {
      const t0 = Date.now();
      const id = next++;
      try {
        conn ??= await connectFrom({ source: o.source ?? '127.0.0.2', host: o.host, port: 3306, user: 'linroot', password: o.password, ca: o.ca });
        await conn.query(`INSERT INTO ${o.table} (id, v) VALUES (?, 'w')`, [id]);
        acked.push(id);
        if (failingSince !== undefined) longestOutageMs = Math.max(longestOutageMs, Date.now() - failingSince);
        failingSince = undefined;
      } catch (e) {
        errors.push((e as Error).message);
        failingSince ??= t0;
        conn?.destroy();
        conn = undefined;
      }
      await new Promise((r) => setTimeout(r, Math.max(0, every - (Date.now() - t0))));
    }
  })();
  return {
    acked,
    errors,
    get longestOutageMs() {
      return Math.max(longestOutageMs, failingSince !== undefined ? Date.now() - failingSince : 0);
    },
    get failing() {
      return failingSince !== undefined;
    },
    async stop() {
      stopped = true;
      await loop;
      await conn?.end().catch(() => undefined);
    },
  };
}
