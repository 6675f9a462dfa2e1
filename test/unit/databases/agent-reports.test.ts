import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { ManualClock } from '../../../lib/clock.js';
import { silentLogger } from '../../../lib/logger.js';
import { openDatabase, type Db } from '../../../control-plane/store/sqlite/database.js';
import { sqliteDatabaseRepository } from '../../../control-plane/store/sqlite/database-repository.js';
import { sqliteEvents } from '../../../control-plane/store/sqlite/core-repositories.js';
import { EventService } from '../../../control-plane/domain/events/event-service.js';
import { DatabaseObserver } from '../../../control-plane/domain/databases/observer.js';
import type { DatabaseService } from '../../../control-plane/domain/databases/database-service.js';
import { AgentReports, type AgentReportView } from '../../../control-plane/domain/databases/agent-reports.js';
import { databaseRecord } from '../../helpers/database-record.js';

const base = databaseRecord();

/**
 * What one agent report changes, over the real SQLite store, and which rounds it starts: the
 * data planes' only when what they serve (a status, the members) changed, never on a heartbeat.
 */
describe('AgentReports (SQLite store)', () => {
  let dir: string;
  let db: Db;
  afterEach(() => {
    db?.close();
    rmSync(dir, { recursive: true, force: true });
  });

  async function setup() {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-agent-reports-'));
    db = openDatabase(join(dir, 'cp.db'));
    const clock = new ManualClock();
    const repo = sqliteDatabaseRepository(db);
    const events = new EventService(sqliteEvents(db), clock);
    // The service is only reached to purge a deleted database, which no case here has.
    const service = { purge: async () => undefined } as unknown as DatabaseService;
    const observer = new DatabaseObserver({ repo, events, service, clock, logger: silentLogger() });
    const calls = { desired: 0, served: 0, stored: 0, reported: 0 };
    const reports = new AgentReports({
      repo, observer, clock, logger: silentLogger(),
      onDesiredChanged: () => calls.desired++, onServedChanged: () => calls.served++, onStoredChanged: () => calls.stored++, onReported: () => {
        calls.reported++;
      },
    });
    await reports.recordConnection({ id: 'a', region: 'us-east', connected: true, replica: '', appliedVersion: 0, lastSeen: clock.now() });
    const row = await repo.create(base);
    return { repo, reports, calls, row };
  }

  const report = (id: number, status: string, members: Record<string, string>): AgentReportView => ({
    runtime: 'process', membersAcrossHosts: false, engines: [], results: [], nodes: [], backupDays: [],
    databases: [{ id, status, members, caCertPem: '', error: '', usedDiskMb: 0, convergedGeneration: 1, patchPending: false, oldestRestoreMs: 0, backups: [], events: [], nodes: [] }],
  });

  it('places an unplaced database in the round, then starts rounds only for what a report changed', async () => {
    const { repo, reports, calls, row } = await setup();
    const round = await reports.desiredRound([{ id: 'a', region: 'us-east' }]);
    expect(round.members.filter((m) => m.databaseId === row.id).map((m) => m.agentId)).toEqual(['a']);
    expect((await repo.get(row.id))?.agentId).toBe('a');

    // Up: the status changes, so the agents, the data planes and the other replicas all hear of it.
    await reports.apply('a', report(row.id, 'active', { '127.79.1.1': 'primary' }));
    expect((await repo.get(row.id))?.status).toBe('active');
    expect(calls).toEqual({ desired: 1, served: 1, stored: 1, reported: 1 });

    // The same report again (a heartbeat): nothing changed, no round starts.
    await reports.apply('a', report(row.id, 'active', { '127.79.1.1': 'primary' }));
    expect(calls).toEqual({ desired: 1, served: 1, stored: 1, reported: 2 });

    // Only the members moved: the endpoints lead elsewhere, so the data planes get a round, here
    // and on the other replicas (their data planes build from the store too).
    await reports.apply('a', report(row.id, 'active', { '127.79.1.2': 'primary' }));
    expect((await repo.get(row.id))?.members).toEqual({ '127.79.1.2': 'primary' });
    expect(calls).toEqual({ desired: 1, served: 2, stored: 2, reported: 3 });
  });

  it('records the inventory an agent reports and keeps it when a report says none', async () => {
    const { repo, reports } = await setup();
    const engines = [{ id: 'mysql/10.11.14', engine: 'mysql', version: '10.11.14', image: '', binary: '/usr/sbin/mariadbd' }];
    await reports.apply('a', { ...report(0, 'active', {}), databases: [], engines });
    expect((await repo.agent('a'))?.engines).toEqual(engines);
    await reports.apply('a', { ...report(0, 'active', {}), databases: [], runtime: '' });
    expect(await repo.agent('a')).toMatchObject({ engines, runtime: 'process' });
  });
});
