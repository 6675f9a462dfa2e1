// e2e-lane: concurrent (port 0, temp folders, no NodeBalancer or database addresses).
import { afterAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startControlPlane, type ControlPlane } from '../../control-plane/main.js';
import { silentLogger } from '../../lib/logger.js';
import { enrolHost } from '../helpers/fleet.js';
import { api, until } from '../helpers/lab.js';
import { attemptLog, logLines, startProc, type Proc } from '../helpers/replica-procs.js';

/** The reconnect loops' backoff cap (lib/backoff.ts: 10 s plus the half base it adds). */
const BACKOFF_CAP_MS = 10_125;
const OUTAGE_MS = Number(process.env.FULCRUM_OUTAGE_MS ?? 30_000);

// A control plane that is down for ~30 s and returns on the same ports and state: agents and
// data planes are back within the backoff cap plus 2 s (docs/architecture.md "The streams").
describe('control plane outage and return', () => {
  const stateDir = mkdtempSync(join(tmpdir(), 'ops-outage-cp-'));
  const dpState = mkdtempSync(join(tmpdir(), 'ops-outage-dp-'));
  const agentState = mkdtempSync(join(tmpdir(), 'ops-outage-agent-'));
  let cp: ControlPlane | undefined;
  const hosts: Proc[] = [];

  afterAll(async () => {
    for (const h of hosts) await h.stop();
    await cp?.close();
    for (const d of [stateDir, dpState, agentState]) rmSync(d, { recursive: true, force: true });
  });

  it('brings agents and data planes back within the backoff cap plus 2 s', async () => {
    cp = await startControlPlane({ stateDir, apiPort: 0, grpcPort: 0, bootstrapPort: 0, logger: silentLogger() });
    const grpcPort = Number(cp.grpcAddress.split(':').pop());
    const bootstrapPort = Number(cp.bootstrapAddress.split(':').pop());
    await enrolHost(cp, dpState, 'dataplane', 'ops-outage-dp');
    await enrolHost(cp, agentState, 'agent', 'ops-outage-agent');
    const dp = startProc('dataplane', ['dataplane', '--control-plane', cp.grpcAddress, '--state', dpState]);
    const agent = startProc('agent', ['agent', '--control-plane', cp.grpcAddress, '--state', agentState, '--runtime', 'process']);
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
    process.stdout.write(`data plane attempts (times from the stop; the return was at +${((up - down) / 1000).toFixed(2)}s):\n  ${attemptLog(dp, down).join('\n  ')}\n`
      + `agent attempts:\n  ${attemptLog(agent, down).join('\n  ')}\n`);
    expect(back.dp).toBeLessThanOrEqual(BACKOFF_CAP_MS + 2000);
    expect(back.agent).toBeLessThanOrEqual(BACKOFF_CAP_MS + 2000);
    // The first stream that held after the return stayed: none was opened and lost again.
    await new Promise((r) => setTimeout(r, 1000));
    for (const [host, connected, lost] of [[dp, /^config stream connected$/, /^config stream lost/], [agent, /^control plane stream connected$/, /^control plane stream lost/]] as const) {
      const held = logLines(host, down, connected);
      expect(held, host.name).toHaveLength(1);
      expect(logLines(host, held[0]!.time, lost), host.name).toEqual([]);
    }
  });
});
