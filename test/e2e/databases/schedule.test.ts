// e2e-lane: concurrent (port 0, its own 127.78/79 blocks (ownOctet), temp folders, an injected clock).
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync, existsSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { ManualClock, wireTime } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { detectLocalEngines } from '../../../control-plane/domain/databases/catalogue.js';
import { startAgent, type RunningAgent } from '../../../agent/main.js';
import { databaseDir } from '../../../agent/database/state.js';
import { MYSQL, ownOctet, until } from './db-lab.js';
import type { OctetClaim } from '../../helpers/address-blocks.js';
import { testRateLimits } from '../../helpers/lab.js';
import { readingClock } from '../../helpers/clocks.js';

/**
 * Issue 8 acceptance 4 (auto backups at 00:00 UTC keeping 7, caught up after an agent restart)
 * and the window part of acceptance 5 (a pending patch applies inside the maintenance window and
 * not outside), with an injected clock in an in-process agent and real MariaDB servers.
 */
describe('Managed MySQL schedules with an injected clock', () => {
  const DAY = 86_400_000;
  const monday = Date.UTC(2030, 0, 7); // 2030-01-07 is a Monday
  const clock = new ManualClock(monday + 12 * 3_600_000);
  const cpDir = mkdtempSync(join(tmpdir(), 'fulcrum-sched-cp-'));
  const agentDir = mkdtempSync(join(tmpdir(), 'fulcrum-sched-agent-'));
  const binDir = mkdtempSync(join(tmpdir(), 'fulcrum-sched-bin-'));
  const enginesFile = join(cpDir, 'database-engines.json');
  let cp: ControlPlane;
  let agent: RunningAgent | undefined;
  let engineId: string;
  let binary: string;
  let id: number;
  let claim: OctetClaim | undefined;
  let nodePool = '';

  const api = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(cp.apiUrl + path, {
      method, headers: { authorization: `Bearer ${cp.adminToken}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const json = JSON.parse(await res.text());
    if (res.status !== 200) throw new Error(`${method} ${path} -> ${res.status} ${JSON.stringify(json)}`);
    return json;
  };
  const start = async () => {
    // The agent's operator lists the patched build in its catalogue: an agent runs nothing else.
    const version = engineId.split('/')[1]!;
    const catalogue = [binary, join(binDir, 'mariadbd')].map((b) => ({ id: engineId, engine: 'mysql' as const, version, binary: b }));
    agent = await startAgent({
      id: 'sched-agent', region: 'us-east', controlPlane: cp.grpcAddress, stateDir: agentDir, runtime: 'process', catalogue,
      nodeAddressPool: nodePool, heartbeatMs: 200, reconcileIntervalMs: 200, clock, logger: silentLogger(), insecureGrpc: true,
    });
  };
  const autos = async () => (await api('GET', `${MYSQL}/${id}/backups`)).data.filter((b: any) => b.type === 'auto');
  /** Resolves after the agent has sent `n` more reports (each follows at least one reconcile round). */
  const reports = async (n: number) => {
    const seen = () => (cp.context.db!.prepare("SELECT last_seen FROM database_agents WHERE id = 'sched-agent'").pluck().get() as number) ?? 0;
    for (let i = 0; i < n; i++) {
      const t = seen();
      await until('next agent report', () => seen() > t || undefined, 5_000, 20);
    }
  };
  const nodePid = async () => (await agent!.runtime.list({}))[0]?.ref;

  beforeAll(async () => {
    const [e] = await detectLocalEngines();
    if (!e) throw new Error('no local mariadbd/mysqld');
    engineId = e.id;
    binary = e.binary;
    writeFileSync(enginesFile, JSON.stringify([{ id: engineId, binary }]));
    claim = await ownOctet();
    nodePool = `127.79.${claim.octet}.0/24`;
    // The control plane decides when auto backups are due (docs/databases.md, "Auto backups"): it
    // reads the same injected time as the agent, checked every 200 ms. Plain gRPC: certificates
    // are issued for real time and checked against the injected one, years apart here (mutual
    // TLS has its own tests).
    cp = await startControlPlane({ stateDir: cpDir, apiPort: 0, grpcPort: 0, databasePool: `127.78.${claim.octet}.0/24`, logger: silentLogger(),
      rateLimits: testRateLimits, clock: readingClock(clock), backupScheduleMs: 200, insecureGrpc: true }); // polls every 100 ms for minutes (helpers/lab.ts)
    await start();
    const d = await api('POST', MYSQL, { label: 'sched-db', region: 'us-east', type: 'g6-nanode-1', engine: engineId, allow_list: ['0.0.0.0/0'] });
    id = d.id;
    await until('active', async () => (await api('GET', `${MYSQL}/${id}`)).status === 'active' || undefined, 60_000, 100);
    // The schedule starts from the first day the agent sees the database up.
    await until('first backup day recorded', () => {
      const f = join(databaseDir(agentDir, id), 'state.json');
      return (existsSync(f) && JSON.parse(readFileSync(f, 'utf8')).lastAutoBackupDay) || undefined;
    }, 10_000);
  });
  afterAll(async () => {
    if (id) await api('DELETE', `${MYSQL}/${id}`).catch(() => undefined);
    if (agent) await until('nodes removed', async () => (await agent!.runtime.list({})).length === 0 || undefined, 30_000).catch(() => undefined);
    if (agent) {
      for (const n of await agent.runtime.list({})) await agent.runtime.remove(n.name, { withData: true });
      await agent.close();
    }
    await cp?.close();
    for (const d of [cpDir, agentDir, binDir]) rmSync(d, { recursive: true, force: true });
    await claim?.release();
  });

  it('acceptance 4: auto backups at 00:00 UTC, only the newest 7 kept, a missed run caught up after a restart', async () => {
    expect(await autos()).toEqual([]);
    for (let day = 1; day <= 9; day++) {
      clock.set(monday + day * DAY - 30_000); // 23:59:30: not yet
      await reports(3);
      expect((await autos()).length).toBe(Math.min(day - 1, 7));
      clock.set(monday + day * DAY + 5_000); // 00:00:05
      const want = wireTime(monday + day * DAY + 5_000);
      await until(`auto backup of day ${day}`, async () => (await autos()).some((b: any) => b.created === want) || undefined, 30_000, 100);
      // The oldest goes right after the new one is stored; on a loaded machine that report can
      // come after the next check's three reports, so the count is awaited here.
      await until(`${Math.min(day, 7)} auto backups after day ${day}`, async () => (await autos()).length === Math.min(day, 7) || undefined, 10_000, 100);
    }
    await until('pruned to 7', async () => (await autos()).length === 7 || undefined, 10_000, 100);
    const kept = (await autos()).map((b: any) => b.created).sort();
    expect(kept[0]).toBe(wireTime(monday + 3 * DAY + 5_000));
    expect(kept.every((c: string) => c.endsWith('T00:00:05'))).toBe(true);
    expect((await autos())[0].label).toMatch(/^Scheduled - /);

    await agent!.close();
    agent = undefined;
    clock.set(monday + 10 * DAY + 3 * 3_600_000); // the agent was away at midnight
    await start();
    const want = wireTime(monday + 10 * DAY + 3 * 3_600_000);
    await until('missed run caught up', async () => (await autos()).some((b: any) => b.created.startsWith(want.slice(0, 10))) || undefined, 30_000, 100);
    await until('still 7', async () => (await autos()).length === 7 || undefined, 10_000, 100);
    expect(want.slice(0, 10)).toBe('2030-01-17');
  });

  it('acceptance 5: a pending patch waits for the maintenance window and applies inside it', async () => {
    // Window: weekly, Wednesday (3) 02:00 UTC for 1 hour.
    await api('PUT', `${MYSQL}/${id}`, { updates: { frequency: 'weekly', day_of_week: 3, hour_of_day: 2, duration: 1, week_of_month: null } });
    await until('active', async () => (await api('GET', `${MYSQL}/${id}`)).status === 'active' || undefined, 20_000, 100);
    const wednesday = monday + 16 * DAY; // 2030-01-23
    clock.set(wednesday + 5 * 3_600_000); // 05:00, outside the window
    const pid = await nodePid();
    // The operator points the engine at a new build of the same version.
    const patched = join(binDir, 'mariadbd');
    symlinkSync(binary, patched);
    writeFileSync(enginesFile, JSON.stringify([{ id: engineId, binary: patched }]));
    await until('patch pending on the agent', () => (agent!.agent.report().databases ?? []).find((d) => Number(d.id) === id)?.patchPending || undefined, 20_000, 100);
    await reports(5);
    expect(await nodePid()).toBe(pid);
    expect((agent!.agent.report().databases ?? []).find((d) => Number(d.id) === id)?.patchPending).toBe(true);
    clock.set(wednesday + 7 * DAY + 2 * 3_600_000 + 60_000); // next Wednesday 02:01, inside
    await until('patched inside the window', async () => {
      const nodes = await agent!.runtime.list({});
      return (nodes[0]?.ref !== pid && nodes[0]?.spec?.engine.binary === patched && nodes[0]?.state === 'running') || undefined;
    }, 60_000, 200);
    await until('active after patch', async () => (await api('GET', `${MYSQL}/${id}`)).status === 'active' || undefined, 30_000, 100);
    await until('patch event', async () => (await api('GET', '/v4/account/events')).data
      .some((e: any) => e.entity?.id === id && e.action === 'database_update' && /patch/i.test(e.message ?? '')) || undefined, 10_000, 100);
  });
});
