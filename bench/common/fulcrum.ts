/**
 * Our product, started the real way for a benchmark: the control plane in this process (its
 * REST API and gRPC server on loopback), and the data plane as its own Node process started with
 * the `fulcrum dataplane` command, configured over gRPC. NodeBalancers are created through the
 * REST API, exactly as a user would.
 */
import { existsSync, mkdirSync, rmSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import type { RunningAgent } from '../../agent/main.js';
import { withDataplaneHeapFlags } from '../../lib/node-flags.js';
import { silentLogger } from '../../lib/logger.js';
import { GiveUp, startProcess, waitFor, type Spawned } from './processes.js';

const here = dirname(fileURLToPath(import.meta.url));
const compiled = here.split('/').includes('dist');

/** The repository root (the folder holding package.json), found from this file. */
export function repoRoot(): string {
  let dir = here;
  while (!existsSync(join(dir, 'package.json')) || dir.endsWith('/dist')) {
    const up = dirname(dir);
    if (up === dir) throw new Error('repository root not found');
    dir = up;
  }
  return dir;
}

export interface Api {
  (method: string, path: string, body?: unknown): Promise<any>;
}

/** A REST client that throws on any non-2xx answer, naming the call and the API's errors. */
export function apiClient(apiUrl: string, token: string): Api {
  return async (method, path, body) => {
    const res = await fetch(`${apiUrl}/v4${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    if (!res.ok) throw new Error(`${method} ${path} -> ${res.status}: ${text}`);
    return text ? JSON.parse(text) : {};
  };
}

/**
 * A control plane for a bench. Its NodeBalancer pool is its own /16 (not the product's default
 * 127.77.0.0/16), so a bench never collides with a lab or test suite running at the same time.
 */
export async function startBenchControlPlane(stateDir: string, nodebalancerPool: string): Promise<{ cp: ControlPlane; api: Api }> {
  mkdirSync(stateDir, { recursive: true });
  // The bench's backends are on loopback, which the product's default backend networks refuse
  // (docs/security/api.md): allowed here as the lab allows it. The API's rate limits are off: a
  // bench creates thousands of NodeBalancers from one token as fast as the API takes them.
  const cp = await startControlPlane({
    stateDir, logger: silentLogger(), apiPort: 0, grpcPort: 0, nodebalancerPool, backendNetworks: ['127.0.0.0/8'],
    rateLimits: { perToken: 0, perIp: 0, stats: 0 },
  });
  return { cp, api: apiClient(cp.apiUrl, cp.adminToken) };
}

export interface DataplaneProcessOptions {
  id: string;
  grpcAddress: string;
  stateDir: string;
  logDir: string;
  /** The control plane, which issues the data plane a join token (mutual TLS, as in production). */
  cp: ControlPlane;
  /** Extra node flags, e.g. --cpu-prof. */
  nodeFlags?: string[];
  /** Extra `fulcrum dataplane` flags, e.g. --workers 2. */
  flags?: string[];
}

/** Starts `fulcrum dataplane` as a separate Node process (one process, one event loop). */
export async function startDataplaneProcess(o: DataplaneProcessOptions): Promise<Spawned> {
  const token = (await o.cp.context.fleet.createJoinToken({ role: 'dataplane', id: o.id, region: '*' })).token;
  mkdirSync(o.stateDir, { recursive: true });
  const env: NodeJS.ProcessEnv = { ...process.env, FULCRUM_LOG_LEVEL: process.env.FULCRUM_LOG_LEVEL ?? 'warn' };
  // Compiled bench -> compiled data plane; a bench run through tsx runs the sources.
  if (compiled) delete env.FULCRUM_FROM_SOURCE;
  else env.FULCRUM_FROM_SOURCE = '1';
  return startProcess(o.id, process.execPath, [
    ...withDataplaneHeapFlags(o.nodeFlags ?? []),
    join(repoRoot(), 'bin', 'fulcrum.js'),
    'dataplane', '--control-plane', o.grpcAddress, '--state', o.stateDir,
    '--join', token,
    ...(o.flags ?? []),
  ], o.logDir, env, o.stateDir); // cwd: V8 log files (--perf-basic-prof) land in the temp folder
}

/** The newest snapshot version the control plane has produced (0 before the first push). */
export async function currentConfigVersion(cp: ControlPlane): Promise<number> {
  return Number((await cp.context.kv.get('config_version')) ?? 0);
}

/**
 * Waits until the data plane has ACKed the control plane's newest snapshot. Call it at least
 * one coalescing window (10 ms) after the last API write, so that the push has been made.
 */
export async function waitForApplied(cp: ControlPlane, api: Api, dataplaneId: string, timeoutMs = 60_000): Promise<number> {
  await new Promise((r) => setTimeout(r, 50));
  return waitFor(`data plane ${dataplaneId} to apply the configuration`, async () => {
    const r = await api('GET', '/fulcrum/dataplanes');
    const dp = r.data.find((d: any) => d.id === dataplaneId);
    if (dp?.lastError) throw new GiveUp(`data plane rejected the snapshot: ${dp.lastError}`);
    const want = await currentConfigVersion(cp);
    return dp?.connected && want > 0 && dp.versionApplied >= want ? (dp.versionApplied as number) : undefined;
  }, timeoutMs, 25);
}

/**
 * Stops what a database bench part started, in the order that leaves nothing behind: the agent,
 * then its nodes with their data (mariadbd processes in sessions of their own and containers
 * outlive the bench otherwise), then the control plane, then the parts' folders.
 */
export async function stopAgentAndControlPlane(started: { cp?: ControlPlane; agent?: RunningAgent }, folders: string[]): Promise<void> {
  const { cp, agent } = started;
  if (agent) {
    await agent.close();
    for (const n of await agent.runtime.list({})) await agent.runtime.remove(n.name, { withData: true });
  }
  await cp?.close();
  for (const f of folders) rmSync(f, { recursive: true, force: true, maxRetries: 3 });
}
