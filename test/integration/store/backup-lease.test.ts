import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import pg from 'pg';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startControlPlane, type ControlPlane } from '../../../control-plane/main.js';
import { detectLocalEngines } from '../../../control-plane/domain/databases/catalogue.js';
import { openPostgresStore } from '../../../control-plane/store/postgres/store.js';
import { startAgent, type RunningAgent } from '../../../agent/main.js';
import { createLocalBackupStorage } from '../../../agent/backup/backup-storage.js';
import { databaseDir } from '../../../agent/database/state.js';
import { utcDay } from '../../../lib/utc-day.js';
import { silentLogger } from '../../../lib/logger.js';
import { api } from '../../helpers/lab.js';
import { waitFor } from '../../helpers/backends.js';
import { ShiftedClock } from '../../helpers/clocks.js';
import { startPgCluster, type PgCluster } from '../../helpers/postgres.js';

const DAY = 86_400_000;
/** The advisory lock key of the replicas' lease (control-plane/store/postgres/replicas.ts). */
const LEASE_LOCK = 0x46554c45;
const MYSQL = '/v4/databases/mysql/instances';

/**
 * Auto backups decided under the lease (docs/databases.md, "Auto backups"): control-plane
 * replicas (three) on one PostgreSQL, each with its own injected clock (real time shifted, so their push
 * loops and lease keep running), and a real agent on the process runtime with a real mariadbd.
 * A day's backup is taken exactly once: with both replicas up, when the lease holder dies just
 * before midnight, and when it dies after claiming the day but before any agent heard of it.
 */
describe('auto backups under the lease: once across replicas', () => {
  let cluster: PgCluster;
  let url: string;
  let stateDir: string;
  let agentDir: string;
  let agent: RunningAgent | undefined;
  let admin: pg.Client;
  let id = 0;
  const replicas: { cp: ControlPlane; clock: ShiftedClock; dead: boolean }[] = [];
  // Midnight UTC after the day the database is created on (every clock starts at real time).
  const day0 = Date.parse(`${utcDay(Date.now())}T00:00:00Z`);
  const octet = 100 + Math.floor(Math.random() * 150);
  let engine: { id: string; binary: string };
  // The agent's own clock: it decides its fallback schedule when no control plane answers.
  const agentClock = new ShiftedClock();

  const startReplica = async (atMs: number) => {
    const clock = new ShiftedClock(atMs);
    const cp = await startControlPlane({
      stateDir, store: url, insecureGrpc: true, clock, backupScheduleMs: 200, logger: silentLogger(),
      nodebalancerPool: `127.77.${octet}.0/24`, databasePool: `127.78.${octet}.0/24`,
    });
    replicas.push({ cp, clock, dead: false });
    return replicas.at(-1)!;
  };
  const alive = () => replicas.filter((r) => !r.dead);
  const holder = () => waitFor(() => {
    const h = alive().filter((r) => r.cp.context.replicas.leaseHeld());
    return h.length === 1 ? h[0] : undefined;
  }, 20_000, 'one lease holder');
  const setClocks = (ms: number) => {
    for (const r of alive()) r.clock.set(ms);
  };
  /**
   * A replica dying as a process would: its timers stop (lease, schedule, push rounds), its gRPC
   * port closes (the agent moves to another replica) and PostgreSQL drops its lease session.
   */
  const kill = async (r: (typeof replicas)[number]) => {
    r.clock.kill();
    r.dead = true;
    r.cp.context.grpcServer.forceShutdown();
    await admin.query("SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory' AND objid = $1 AND granted", [LEASE_LOCK]);
  };
  const viaApi = () => api(alive()[0]!.cp.apiUrl, alive()[0]!.cp.adminToken);
  const apiAutos = async () => ((await viaApi()('GET', `${MYSQL}/${id}/backups`)).body.data as { type: string }[]).filter((b) => b.type === 'auto').length;
  const storedAutos = async () => (await createLocalBackupStorage(join(agentDir, 'backups')).list(id)).filter((m) => m.type === 'auto').length;
  const lastDay = () => {
    const f = join(databaseDir(agentDir, id), 'state.json');
    return existsSync(f) ? (JSON.parse(readFileSync(f, 'utf8')) as { lastAutoBackupDay?: string }).lastAutoBackupDay : undefined;
  };
  const slotRows = async () => (await admin.query('SELECT slot, taken FROM database_backup_slots WHERE database_id = $1 ORDER BY slot', [id])).rows as { slot: string; taken: string | null }[];
  /** The day's backup is in the agent's storage and the API, once, and stays once. */
  const expectOnce = async (day: string, total: number) => {
    await waitFor(async () => lastDay() === day && (await storedAutos()) === total && (await apiAutos()) === total, 90_000, `auto backup of ${day}`);
    await waitFor(async () => (await slotRows()).some((s) => s.slot === day && s.taken !== null), 20_000, `${day} marked taken`);
    // Many schedule rounds (200 ms) and agent reports later: still exactly one for the day.
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await storedAutos()).toBe(total);
    expect(await apiAutos()).toBe(total);
    expect((await slotRows()).map((s) => s.slot)).toEqual([day]);
  };

  beforeAll(async () => {
    const [e] = await detectLocalEngines();
    if (!e) throw new Error('no local mariadbd/mysqld');
    engine = { id: e.id, binary: e.binary };
    cluster = await startPgCluster();
    url = await cluster.newDatabase();
    admin = new pg.Client({ connectionString: url });
    stateDir = mkdtempSync(join(tmpdir(), 'hbl-cp-'));
    agentDir = mkdtempSync(join(tmpdir(), 'hbl-agent-'));
    writeFileSync(join(stateDir, 'database-engines.json'), JSON.stringify([{ id: engine.id, binary: engine.binary }]));
    // Three replicas: two tests below each kill the lease holder.
    for (let i = 0; i < 3; i++) await startReplica(Date.now());
    await admin.connect();
    agent = await startAgent({
      id: 'hbl-agent', region: 'us-east', controlPlane: replicas.map((r) => r.cp.grpcAddress).join(','), stateDir: agentDir, runtime: 'process',
      catalogue: [{ id: engine.id, engine: 'mysql', version: engine.id.split('/')[1]!, binary: engine.binary }],
      nodeAddressPool: `127.79.${octet}.0/24`, heartbeatMs: 200, reconcileIntervalMs: 200, insecureGrpc: true, clock: agentClock, logger: silentLogger(),
    });
    const made = await viaApi()('POST', MYSQL, { label: 'hbl-db', region: 'us-east', type: 'g6-nanode-1', engine: engine.id, allow_list: ['127.0.0.1/32'] });
    expect(made.status, JSON.stringify(made.body)).toBe(200);
    id = made.body.id as number;
    await waitFor(async () => (await viaApi()('GET', `${MYSQL}/${id}`)).body.status === 'active', 120_000, 'database active');
    // The agent's first day is the day it first saw the database up: nothing due on it.
    await waitFor(() => lastDay(), 20_000, 'first day recorded');
  }, 240_000);

  afterAll(async () => {
    if (id && alive().length > 0) await viaApi()('DELETE', `${MYSQL}/${id}`).catch(() => undefined);
    if (agent) {
      if (alive().length > 0) await waitFor(async () => (await agent!.runtime.list({})).length === 0, 30_000).catch(() => undefined);
      // The agent stops first. The last test leaves no control plane, so no delete reached it, and
      // a running agent keeps serving its last desired state (static stability): it started the
      // removed server again a round later, and that server outlived the file (nodes outlive
      // their agent by design). The process runtime needs no agent to remove them.
      await agent.close();
      for (const n of await agent.runtime.list({})) await agent.runtime.remove(n.name, { withData: true });
    }
    // A killed replica's close may wait on timers that no longer run: bounded.
    for (const r of replicas) await Promise.race([r.cp.close().catch(() => undefined), new Promise((res) => setTimeout(res, 5_000))]);
    await admin?.end().catch(() => undefined);
    await cluster?.stop();
    for (const d of [stateDir, agentDir]) if (d) rmSync(d, { recursive: true, force: true });
  }, 90_000);

  it('with every replica up, the next midnight\'s backup is taken exactly once', async () => {
    expect(await storedAutos()).toBe(0);
    await holder();
    setClocks(day0 + DAY - 5_000);
    await new Promise((r) => setTimeout(r, 1_500));
    expect(await slotRows()).toEqual([]);
    setClocks(day0 + DAY + 5_000);
    await expectOnce(utcDay(day0 + DAY), 1);
  }, 180_000);

  it('the lease holder killed just before midnight: the other replica takes the lease and the backup is taken exactly once', async () => {
    setClocks(day0 + 2 * DAY - 3_000);
    const h = await holder();
    await kill(h);
    setClocks(day0 + 2 * DAY + 5_000);
    const next = await holder();
    expect(next).not.toBe(h);
    await expectOnce(utcDay(day0 + 2 * DAY), 2);
  }, 180_000);

  it('a holder that dies after claiming the day but before any agent heard of it: the day is still taken, once', async () => {
    setClocks(day0 + 3 * DAY - 3_000);
    const h = await holder();
    await kill(h);
    // The dead holder's last act: the day's claim committed, nothing announced.
    const store = await openPostgresStore(url, { kekFile: join(stateDir, 'keys', 'kek') });
    try {
      expect(await store.databases.claimBackupSlot(id, utcDay(day0 + 3 * DAY), day0 + 3 * DAY + 1)).toBe(true);
    } finally {
      await store.close();
    }
    setClocks(day0 + 3 * DAY + 5_000);
    await holder();
    await expectOnce(utcDay(day0 + 3 * DAY), 3);
  }, 180_000);

  it('with no control plane for 6 hours the agent takes the day itself, once, and not before', async () => {
    // Just before the agent's next midnight, while it is still connected.
    agentClock.set(day0 + 4 * DAY - 60_000);
    await new Promise((r) => setTimeout(r, 1_000));
    for (const r of alive()) await kill(r);
    await waitFor(() => agent!.agent.disconnectedSince() !== undefined, 20_000, 'agent disconnected');
    // Five hours without a control plane: the day is due by the agent's clock, but not yet its own to take.
    agentClock.set(day0 + 4 * DAY + 5 * 3_600_000);
    await new Promise((r) => setTimeout(r, 3_000));
    expect(lastDay()).toBe(utcDay(day0 + 3 * DAY));
    expect(await storedAutos()).toBe(3);
    agentClock.set(day0 + 4 * DAY + 6 * 3_600_000);
    await waitFor(async () => lastDay() === utcDay(day0 + 4 * DAY) && (await storedAutos()) === 4, 90_000, 'fallback backup');
    await new Promise((r) => setTimeout(r, 3_000));
    expect(await storedAutos()).toBe(4);
  }, 180_000);
});
