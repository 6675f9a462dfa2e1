// e2e-lane: concurrent (port 0, temp folders, no NodeBalancer or database addresses).
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { ChildProcess } from 'node:child_process';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { silentLogger } from '../../lib/logger.js';
import { enrolHost } from '../helpers/fleet.js';
import { api, runFulcrum, until } from '../helpers/lab.js';

/** The reconnect loops' backoff cap (lib/backoff.ts: 10 s plus the half base it adds). */
const BACKOFF_CAP_MS = 10_125;
const OUTAGE_MS = Number(process.env.FULCRUM_OUTAGE_MS ?? 30_000);

interface Host {
  proc: ChildProcess;
  log: string[];
}

function startHost(args: string[]): Host {
  const proc = runFulcrum(args);
  const log: string[] = [];
  let buf = '';
  const take = (d: Buffer) => {
    buf += d.toString();
    const lines = buf.split('\n');
    buf = lines.pop()!;
    log.push(...lines);
  };
  proc.stdout!.on('data', take);
  proc.stderr!.on('data', take);
  return { proc, log };
}

/** The reconnect attempts a host logged (time, message, why, delay), for the printout. */
function attempts(h: Host, since: number): string[] {
  const out: string[] = [];
  for (const line of h.log) {
    try {
      const j = JSON.parse(line) as { time: number; msg: string; why?: string; delay?: number; delayMs?: number; address?: string };
      if (j.time >= since && /reconnect|connected|stream/.test(j.msg)) {
        out.push(`+${((j.time - since) / 1000).toFixed(2)}s ${j.msg} ${j.address ?? ''} ${j.why ?? ''} delay=${j.delay ?? j.delayMs ?? ''}`);
      }
    } catch {
      // not a log line
    }
  }
  return out;
}

// A control plane that is down for ~30 s and returns on the same ports and state: agents and
// data planes are back within the backoff cap plus 2 s (docs/architecture.md "The streams").
describe('control plane outage and return', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'ops-outage-cp-'));
  const dpState = mkdtempSync(join(tmpdir(), 'ops-outage-dp-'));
  const agentState = mkdtempSync(join(tmpdir(), 'ops-outage-agent-'));
  let cp: ControlPlane | undefined;
  const hosts: Host[] = [];

  afterAll(async () => {
    for (const h of hosts) {
      if (h.proc.exitCode === null) {
        const gone = new Promise((r) => h.proc.once('exit', r));
        h.proc.kill('SIGTERM');
        await gone;
      }
    }
    await cp?.close();
    for (const d of [stateDir, dpState, agentState]) rmSync(d, { recursive: true, force: true });
  });

  it('brings agents and data planes back within the backoff cap plus 2 s', async () => {
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, bootstrapPort: 0, logger: silentLogger() });
    const grpcPort = Number(cp.grpcAddress.split(':').pop());
    const bootstrapPort = Number(cp.bootstrapAddress.split(':').pop());
    await enrolHost(cp, dpState, 'dataplane', 'ops-outage-dp');
    await enrolHost(cp, agentState, 'agent', 'ops-outage-agent');
    const dp = startHost(['dataplane', '--control-plane', cp.grpcAddress, '--state', dpState]);
    const agent = startHost(['agent', '--control-plane', cp.grpcAddress, '--state', agentState, '--runtime', 'process']);
    hosts.push(dp, agent);

    const connected = async (): Promise<{ dp: boolean; agent: boolean }> => {
      const call = api(cp!.apiUrl, cp!.adminToken);
      const dps = (await call('GET', '/v4/fulcrum/dataplanes')).body.data as { id: string; connected: boolean }[];
      const agents = (await call('GET', '/v4/fulcrum/agents')).body.data as { id: string; connected: boolean }[];
      return { dp: dps.some((d) => d.id === 'ops-outage-dp' && d.connected), agent: agents.some((a) => a.id === 'ops-outage-agent' && a.connected) };
    };
    await until('both connected', async () => {
      const c = await connected();
      return c.dp && c.agent;
    }, 60_000, 100);

    await cp.close();
    cp = undefined;
    const down = Date.now();
    await new Promise((r) => setTimeout(r, OUTAGE_MS));
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort, bootstrapPort, logger: silentLogger() });
    const up = Date.now();

    const back: { dp?: number; agent?: number } = {};
    await until('both back', async () => {
      const c = await connected();
      const t = Date.now() - up;
      if (c.dp) back.dp ??= t;
      if (c.agent) back.agent ??= t;
      return back.dp !== undefined && back.agent !== undefined;
    }, 60_000, 50);

    process.stdout.write(`control plane down ${((up - down) / 1000).toFixed(1)} s; back after its return: data plane ${back.dp} ms, agent ${back.agent} ms (limit ${BACKOFF_CAP_MS + 2000} ms)\n`);
    process.stdout.write(`data plane attempts:\n  ${attempts(dp, down).join('\n  ')}\nagent attempts:\n  ${attempts(agent, down).join('\n  ')}\n`);
    expect(back.dp).toBeLessThanOrEqual(BACKOFF_CAP_MS + 2000);
    expect(back.agent).toBeLessThanOrEqual(BACKOFF_CAP_MS + 2000);
  });
});
