/**
 * The setup every agent integration file repeats: a state folder, a driver standing in for the
 * control plane, an agent on the file's own address slot (in this process, or as its own OS
 * process for tests that kill it), and a cleanup that leaves no server behind whatever a failed
 * test left.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import type { Clock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { startAgent, type RunningAgent, type StartAgentOptions } from '../../../agent/main.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { startDriver, testNet, type Driver } from './control-plane-driver.js';

export interface AgentFixture {
  readonly driver: Driver;
  readonly stateDir: string;
  /** This file's endpoint /24 prefix (`127.78.<slot>`). */
  readonly net: string;
  /** This file's node address pool (`127.79.<slot>.0/24`). */
  readonly nodePool: string;
  /** The agent started last, if any. */
  agent?: RunningAgent;
  /** Options of an in-process agent on this state folder (process runtime, quick reports). */
  options(): StartAgentOptions;
  /** Starts an agent (again) on the same state folder. */
  startAgent(): Promise<RunningAgent>;
  /**
   * Starts an agent on the same state folder as its own OS process (agent-child.ts), for tests
   * that SIGKILL it; resolves once it is ready. `env` adds to its environment (e.g. a crash point).
   */
  spawnAgent(env?: Record<string, string>): Promise<ChildProcess>;
  /** Stops the agent, removes every node under the state folder, the driver and the folder. */
  close(): Promise<void>;
}

export async function createAgentFixture(o: {
  id: string;
  slot: number;
  clock?: Clock;
  reconcileIntervalMs?: number;
  /** More options, evaluated at each start (e.g. a fresh metrics registry). */
  extra?: () => Partial<StartAgentOptions>;
}): Promise<AgentFixture> {
  const stateDir = mkdtempSync(join(tmpdir(), `fulcrum-${o.id}-`));
  // The endpoints are served by a data plane dialling members from this file's own source address.
  const driver = await startDriver({ endpointSource: `${testNet('127.76', o.slot)}.1` });
  const fx: AgentFixture = {
    driver,
    stateDir,
    net: testNet('127.78', o.slot),
    nodePool: `${testNet('127.79', o.slot)}.0/24`,
    options: () => ({
      // The driver is a stand-in control plane without TLS, so the agent runs with the explicit flag.
      id: o.id, region: 'us-east', controlPlane: driver.target, insecureGrpc: true, stateDir, runtime: 'process',
      logger: silentLogger(), nodeAddressPool: fx.nodePool, heartbeatMs: 500, reconcileIntervalMs: o.reconcileIntervalMs ?? 500,
      ...(o.clock ? { clock: o.clock } : {}),
      ...(o.extra?.() ?? {}),
    }),
    async startAgent() {
      fx.agent = await startAgent(fx.options());
      return fx.agent;
    },
    async spawnAgent(env = {}) {
      const script = fileURLToPath(new URL('./agent-child.ts', import.meta.url));
      const c = spawn(process.execPath, ['--import', 'tsx', script], {
        env: { ...process.env, CONTROL_PLANE: driver.target, STATE_DIR: stateDir, NODE_POOL: fx.nodePool, AGENT_ID: o.id, ...env },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      await new Promise<void>((resolve, reject) => {
        c.stdout!.on('data', (d: Buffer) => d.toString().includes('ready') && resolve());
        c.once('exit', (code, signal) => reject(new Error(`agent exited with ${code ?? signal}`)));
      });
      return c;
    },
    async close() {
      await fx.agent?.close();
      const rt = createProcessRuntime({ root: join(stateDir, 'runtime'), logger: silentLogger() });
      for (const n of await rt.list({})) await rt.remove(n.name, { withData: true });
      await driver.close();
      rmSync(stateDir, { recursive: true, force: true });
    },
  };
  return fx;
}
