// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fieldErrors, startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { MYSQL, eventsFor, firstEngine, until, waitStatus } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';
import { hostCredentials } from '../../helpers/fleet.js';

/**
 * The control plane's side of the lifecycle over a real gRPC stream, with a scripted agent that
 * runs no servers: provisioning -> active, updates, snapshots (issue 8 acceptance 3 at the API
 * level), restore, credentials, suspend/resume, degraded/failed, delete. The e2e suite shows the
 * same with the real agent and real MariaDB servers.
 */
describe('databases API lifecycle with a scripted agent', () => {
  let api: ApiHarness;
  let agent: ScriptedAgent;
  let engine: string;
  let id: number;
  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
    agent = startScriptedAgent(api.cp.grpcAddress, { id: 'agent-a', region: 'us-east', credentials: await hostCredentials(api.cp, 'agent', 'agent-a', 'us-east') });
    const r = await api.req('POST', MYSQL, { body: { label: 'life-db', region: 'us-east', type: 'g6-standard-1', engine, allow_list: ['127.0.0.2/32'] } });
    id = r.body.id;
  });
  afterAll(async () => {
    agent?.close();
    await api?.close();
  });

  it('becomes active with hosts, members and a finished database_create event', async () => {
    const d = await waitStatus(api, id, 'active');
    expect(d.hosts.primary).toMatch(/^127\.78\.\d+\.\d+$/);
    expect(d.hosts.secondary).toMatch(/^127\.78\.\d+\.\d+$/);
    expect(d.hosts.secondary).not.toBe(d.hosts.primary);
    expect(d.members).toEqual({ [d.hosts.primary]: 'primary' });
    expect(d.total_disk_size_gb).toBe(50);
    expect(d.used_disk_size_gb).toBe(2);
    expect(d.updates.day_of_week).toBe(7);
    const ev = await eventsFor(api, id, 'database_create');
    expect(ev[0]).toMatchObject({ status: 'finished', percent_complete: 100 });
    const desired = agent.desired()!;
    expect(desired.databases[0]).toMatchObject({ id, clusterSize: 1, replicationType: 'none', sslConnection: true, allowList: ['127.0.0.2/32'], port: 3306, state: 'running' });
    expect(desired.databases[0]!.type).toMatchObject({ id: 'g6-standard-1', memoryMb: 2048, vcpus: 1 });
    const creds = await api.req('GET', `${MYSQL}/${id}/credentials`);
    expect(creds.body.username).toBe('linroot');
    expect(creds.body.password).toMatch(/^[A-Za-z0-9._]{16}$/);
    expect(desired.databases[0]!.rootPassword).toBe(creds.body.password);
    const ssl = await api.req('GET', `${MYSQL}/${id}/ssl`);
    expect(Buffer.from(ssl.body.ca_certificate, 'base64').toString()).toContain('BEGIN CERTIFICATE');
    const agents = await api.req('GET', '/v4/fulcrum/agents');
    expect(agents.body.data).toMatchObject([{ id: 'agent-a', connected: true, region: 'us-east' }]);
  });

  it('applies updates through updating -> active and validates the update body (issue 8 scope)', async () => {
    const bad: [Record<string, unknown>, string][] = [
      [{ allow_list: ['127.0.0.3/32'], type: 'g6-standard-2' }, 'type'],
      [{ type: 'g6-nanode-1' }, 'type'],
      [{ type: 'g6-nope' }, 'type'],
      [{ label: 'xy' }, 'label'],
      [{ allow_list: ['300.1.1.1'] }, 'allow_list[0]'],
      [{ updates: { frequency: 'yearly' } }, 'updates.frequency'],
      [{ updates: { duration: 5 } }, 'updates.duration'],
      [{ updates: { duration: 0 } }, 'updates.duration'],
      [{ updates: { hour_of_day: 24 } }, 'updates.hour_of_day'],
      [{ updates: { day_of_week: 0 } }, 'updates.day_of_week'],
      [{ updates: { day_of_week: 8 } }, 'updates.day_of_week'],
      [{ updates: { frequency: 'monthly' } }, 'updates.week_of_month'],
      [{ updates: { frequency: 'monthly', week_of_month: 5 } }, 'updates.week_of_month'],
      [{ updates: { frequency: 'weekly', week_of_month: 2 } }, 'updates.week_of_month'],
      [{ updates: 'weekly' }, 'updates'],
      [{ cluster_size: 2 }, 'cluster_size'],
    ];
    for (const [body, field] of bad) {
      const r = await api.req('PUT', `${MYSQL}/${id}`, { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(Object.keys(fieldErrors(r.body)), JSON.stringify(body)).toContain(field);
    }
    const put = await api.req('PUT', `${MYSQL}/${id}`, {
      body: { label: 'life-db-2', allow_list: ['127.0.0.3/32'], updates: { frequency: 'monthly', duration: 1, hour_of_day: 8, day_of_week: 3, week_of_month: 3 } },
    });
    expect(put.status).toBe(200);
    expect(put.body).toMatchObject({ status: 'updating', label: 'life-db-2', allow_list: ['127.0.0.3/32'], updates: { frequency: 'monthly', duration: 1, hour_of_day: 8, day_of_week: 3, week_of_month: 3 } });
    await waitStatus(api, id, 'active');
    const ev = await eventsFor(api, id, 'database_update');
    expect(ev[0]).toMatchObject({ status: 'finished', percent_complete: 100 });
    expect(agent.desired()!.databases[0]).toMatchObject({ label: 'life-db-2', allowList: ['127.0.0.3/32'], updates: { frequency: 'monthly', weekOfMonth: 3, dayOfWeek: 3, hourOfDay: 8, duration: 1 } });

    const resize = await api.req('PUT', `${MYSQL}/${id}`, { body: { type: 'g6-standard-2' } });
    // The real service's status while a plan change is applied.
    expect(resize.body).toMatchObject({ status: 'resizing', type: 'g6-standard-2' });
    await waitStatus(api, id, 'active');
    expect(agent.desired()!.databases[0]!.type).toMatchObject({ id: 'g6-standard-2', memoryMb: 4096, vcpus: 2 });
    const weekly = await api.req('PUT', `${MYSQL}/${id}`, { body: { updates: { frequency: 'weekly' } } });
    expect(weekly.body.updates).toMatchObject({ frequency: 'weekly', week_of_month: null });
    await waitStatus(api, id, 'active');
  });

  it('keeps at most 3 snapshots, frees a slot on delete, and checks labels (issue 8 acceptance 3)', async () => {
    for (const label of ['snap_1', 'snap_2', 'snap_3']) {
      const r = await api.req('POST', `${MYSQL}/${id}/backups`, { body: { label, target: 'primary' } });
      expect(r.status).toBe(200);
      expect(r.body).toEqual({});
      await waitStatus(api, id, 'active');
    }
    const list = await api.req('GET', `${MYSQL}/${id}/backups`);
    expect(list.body.results).toBe(3);
    expect(Object.keys(list.body.data[0]).sort()).toEqual(['created', 'id', 'label', 'type']);
    const fourth = await api.req('POST', `${MYSQL}/${id}/backups`, { body: { label: 'snap_4' } });
    expect(fourth.status).toBe(400);
    expect(fourth.body.errors[0].reason).toMatch(/3 snapshots/);
    for (const [body, field] of [
      [{ label: '' }, 'label'], [{ label: 'a'.repeat(31) }, 'label'], [{ label: 'has-dash' }, 'label'], [{ label: 'spa ce' }, 'label'],
      [{}, 'label'], [{ label: 'snap_1' }, 'label'], [{ label: 'ok_label', target: 'replica' }, 'target'], [{ label: 'ok_label', target: 'secondary' }, 'target'],
    ] as [Record<string, unknown>, string][]) {
      const r = await api.req('POST', `${MYSQL}/${id}/backups`, { body });
      expect(r.status, JSON.stringify(body)).toBe(400);
      expect(Object.keys(fieldErrors(r.body)), JSON.stringify(body)).toContain(field);
    }
    const victim = list.body.data.find((b: any) => b.label === 'snap_2');
    const view = await api.req('GET', `${MYSQL}/${id}/backups/${victim.id}`);
    expect(view.body).toEqual(victim);
    expect((await api.req('DELETE', `${MYSQL}/${id}/backups/${victim.id}`)).body).toEqual({});
    expect((await api.req('GET', `${MYSQL}/${id}/backups/${victim.id}`)).status).toBe(404);
    const again = await api.req('POST', `${MYSQL}/${id}/backups`, { body: { label: 'snap_4' } });
    expect(again.status).toBe(200);
    await waitStatus(api, id, 'active');
    await until('backups settled', async () => (await api.req('GET', `${MYSQL}/${id}/backups`)).body.results === 3 || undefined);
    const filtered = await api.req('GET', `${MYSQL}/${id}/backups`, { headers: { 'x-filter': JSON.stringify({ type: 'snapshot', created: { '+gte': '2000-01-01T00:00:00' } }) } });
    expect(filtered.body.data.map((b: any) => b.label).sort()).toEqual(['snap_1', 'snap_3', 'snap_4']);
    const auto = await api.req('GET', `${MYSQL}/${id}/backups`, { headers: { 'x-filter': JSON.stringify({ type: 'auto' }) } });
    expect(auto.body.results).toBe(0);
    const evs = await eventsFor(api, id, 'database_backup_create');
    expect(evs.length).toBe(4);
    expect(evs.every((e) => e.status === 'finished')).toBe(true);
    expect((await eventsFor(api, id, 'database_backup_delete'))[0].status).toBe('finished');
  });

  it('restores through restoring -> active, and a failed restore leaves a failed event', async () => {
    const b = (await api.req('GET', `${MYSQL}/${id}/backups`)).body.data[0];
    agent.hold(true);
    expect((await api.req('POST', `${MYSQL}/${id}/backups/${b.id}/restore`)).body).toEqual({});
    await waitStatus(api, id, 'restoring');
    const busy = await api.req('POST', `${MYSQL}/${id}/backups`, { body: { label: 'while_busy' } });
    expect(busy.body.errors[0].reason).toMatch(/restoring/);
    agent.hold(false);
    await waitStatus(api, id, 'active');
    agent.failOps('restore', 'backup 1 failed its checksum');
    await api.req('POST', `${MYSQL}/${id}/backups/${b.id}/restore`);
    await waitStatus(api, id, 'active');
    agent.failOps(undefined);
    const evs = await eventsFor(api, id, 'database_backup_restore');
    expect(evs.map((e) => e.status).sort()).toEqual(['failed', 'finished']);
    expect(evs.find((e) => e.status === 'failed').message).toMatch(/checksum/);
    expect((await api.req('POST', `${MYSQL}/${id}/backups/999/restore`)).status).toBe(404);
  });

  it('resets credentials only once the agent confirms, and patches', async () => {
    const before = (await api.req('GET', `${MYSQL}/${id}/credentials`)).body.password;
    expect((await api.req('POST', `${MYSQL}/${id}/credentials/reset`)).body).toEqual({});
    const after = await until('new password', async () => {
      const p = (await api.req('GET', `${MYSQL}/${id}/credentials`)).body.password;
      return p !== before ? p : undefined;
    });
    expect(agent.desired()!.databases[0]!.rootPassword).toBe(after);
    expect((await eventsFor(api, id, 'database_credentials_reset'))[0].status).toBe('finished');
    const restricted = await api.userToken('resetter', { restricted: true, grants: { database: { [String(id)]: 'read_write' } } });
    expect((await api.req('POST', `${MYSQL}/${id}/credentials/reset`, { token: restricted })).status).toBe(403);
    expect((await api.req('GET', `${MYSQL}/${id}/credentials`, { token: restricted })).status).toBe(200);

    expect((await api.req('POST', `${MYSQL}/${id}/patch`)).body).toEqual({});
    await waitStatus(api, id, 'active');
  });

  it('suspends and resumes', async () => {
    expect((await api.req('POST', `${MYSQL}/${id}/suspend`)).body).toEqual({});
    await waitStatus(api, id, 'suspended');
    expect(agent.desired()!.databases[0]!.state).toBe('suspended');
    const whileSuspended = await api.req('PUT', `${MYSQL}/${id}`, { body: { label: 'zzz-db' } });
    expect({ status: whileSuspended.status, body: whileSuspended.body }).toEqual({ status: 400, body: { errors: [{ reason: 'Your database is suspended; it can be updated only when it is active.' }] } });
    expect((await api.req('POST', `${MYSQL}/${id}/resume`)).body).toEqual({});
    await waitStatus(api, id, 'active');
    const resumeActive = await api.req('POST', `${MYSQL}/${id}/resume`);
    expect({ status: resumeActive.status, body: resumeActive.body }).toEqual({ status: 400, body: { errors: [{ reason: 'Your database is active; it can be resumed only when it is suspended.' }] } });
  });

  it('mirrors degraded and failed with events and goes back to active', async () => {
    agent.setStatus(id, 'degraded');
    await waitStatus(api, id, 'degraded');
    agent.setStatus(id, 'failed');
    await waitStatus(api, id, 'failed');
    agent.setStatus(id, undefined);
    await waitStatus(api, id, 'active');
    expect((await eventsFor(api, id, 'database_degraded')).length).toBe(1);
    expect((await eventsFor(api, id, 'database_failed')).length).toBe(1);
  });

  it('resends the full desired state on reconnect with a version that never goes down', async () => {
    const v1 = agent.desired()!.version;
    agent.close();
    await until('agent disconnected', async () => (await api.req('GET', '/v4/fulcrum/agents')).body.data[0].connected === false || undefined);
    agent = startScriptedAgent(api.cp.grpcAddress, { id: 'agent-a', region: 'us-east', credentials: await hostCredentials(api.cp, 'agent', 'agent-a', 'us-east') });
    const d = await until('desired after reconnect', () => agent.desired());
    expect(d.version).toBeGreaterThanOrEqual(v1);
    expect(d.databases.map((x) => Number(x.id))).toEqual([id]);
    expect((await api.req('GET', `${MYSQL}/${id}`)).body.status).toBe('active');
  });

  it('places databases only on an agent of their region', async () => {
    const r = await api.req('POST', MYSQL, { body: { label: 'lab-db', region: 'lab-local', type: 'g6-nanode-1', engine } });
    const other = startScriptedAgent(api.cp.grpcAddress, { id: 'agent-lab', region: 'lab-local', credentials: await hostCredentials(api.cp, 'agent', 'agent-lab', 'lab-local') });
    try {
      await waitStatus(api, r.body.id, 'active');
      expect(other.desired()!.databases.map((x) => Number(x.id))).toEqual([r.body.id]);
      expect(agent.desired()!.databases.map((x) => Number(x.id))).not.toContain(r.body.id);
      expect((await api.req('DELETE', `${MYSQL}/${r.body.id}`)).body).toEqual({});
      await until('lab db removed from its agent', () => other.desired()!.databases.length === 0 || undefined);
    } finally {
      other.close();
    }
  });

  it('deletes: gone from the API at once, addresses released once the agent no longer runs it', async () => {
    const host = (await api.req('GET', `${MYSQL}/${id}`)).body.hosts.primary;
    expect((await api.req('DELETE', `${MYSQL}/${id}`)).body).toEqual({});
    expect((await api.req('GET', `${MYSQL}/${id}`)).status).toBe(404);
    await until('database dropped', () => agent.desired()!.databases.length === 0 || undefined);
    await until('addresses released', () => (api.cp.context.db!.prepare('SELECT COUNT(*) FROM addresses WHERE ip = ?').pluck().get(host) as number) === 0 || undefined);
    const ev = await eventsFor(api, id, 'database_delete');
    expect(ev[0].status).toBe('finished');
    const again = await api.req('POST', MYSQL, { body: { label: 'life-db-2', region: 'us-east', type: 'g6-nanode-1', engine } });
    expect(again.status).toBe(200);
  });
});
