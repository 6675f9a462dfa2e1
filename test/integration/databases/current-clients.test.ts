// integration-lane: concurrent (startApi on port 0 with a temp state folder and an in-process scripted agent that binds nothing; addresses only as data).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { startApi, type ApiHarness } from '../../helpers/api-harness.js';
import { assertCurrentConfig, assertCurrentDatabase } from '../../helpers/database-schema.js';
import { hostCredentials } from '../../helpers/fleet.js';
import { MYSQL, eventsFor, firstEngine, until, waitStatus } from './helpers.js';
import { startScriptedAgent, type ScriptedAgent } from './scripted-agent.js';

/**
 * The newer platform's fields beside the 4.176 ones (docs/databases.md, "Objects"), checked
 * against the shape today's clients decode (test/helpers/database-schema.ts), with a scripted
 * agent over the real gRPC stream.
 */
const NEWER = 'mysql/99.0.1';

describe('databases API: the fields today\'s clients read', () => {
  let api: ApiHarness;
  let agent: ScriptedAgent;
  let engine: string;
  beforeAll(async () => {
    api = await startApi();
    engine = await firstEngine(api);
    // The agent also offers a newer build, so that a version upgrade has somewhere to go.
    agent = startScriptedAgent(api.cp.grpcAddress, {
      id: 'agent-cur', region: 'us-east', engines: [NEWER], credentials: await hostCredentials(api.cp, 'agent', 'agent-cur', 'us-east'),
    });
    await until('newer engine offered', async () => ((await api.req('GET', '/v4/databases/engines', { token: null })).body.data.some((e: any) => e.id === NEWER) || undefined));
  });
  afterAll(async () => {
    agent?.close();
    await api?.close();
  });

  it('answers platform, members, hosts.standby, port, integer disk sizes and updates.pending, before and after provisioning', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'cur-fields', region: 'us-east', type: 'g6-standard-1', engine } });
    expect(created.status).toBe(200);
    assertCurrentDatabase(created.body);
    // Never null, even while provisioning: both are integers in every schema.
    expect(created.body).toMatchObject({ platform: 'rdbms-default', port: 3306, total_disk_size_gb: 50, used_disk_size_gb: 0, engine_config: {} });
    expect(created.body.hosts).toEqual({ primary: null, secondary: null, standby: null });
    // `mysql` even when nothing is set: the Terraform provider's linode_database_mysql_v2 reads
    // engine_config.mysql.* without a nil check (it crashed after its create on `{}`).
    expect(created.body.engine_config).toEqual({ mysql: {} });
    expect(created.body.updates.pending).toEqual([]);

    const d = await waitStatus(api, created.body.id, 'active');
    assertCurrentDatabase(d);
    expect(d.hosts.standby).toBe(d.hosts.secondary);
    expect(d.hosts.standby).toMatch(/^127\.78\.\d+\.\d+$/);
    expect(d.members).toEqual({ [d.hosts.primary]: 'primary' });
    expect(d.used_disk_size_gb).toBe(2);
    for (const prefix of ['/v4', '/v4beta']) {
      const list = await api.req('GET', `${prefix}/databases/mysql/instances`);
      for (const item of list.body.data) assertCurrentDatabase(item);
    }
  });

  it('lists a build held for the window in updates.pending, planned for the next window start', async () => {
    const created = await api.req('POST', MYSQL, {
      body: { label: 'cur-pending', region: 'us-east', type: 'g6-nanode-1', engine, updates: { frequency: 'weekly', day_of_week: 3, hour_of_day: 5, duration: 4 } },
    });
    const id = created.body.id as number;
    await waitStatus(api, id, 'active');
    agent.setPatchPending(id, true);
    const d = await until('pending update listed', async () => {
      const r = await api.req('GET', `${MYSQL}/${id}`);
      return r.body.updates.pending.length > 0 ? r.body : undefined;
    });
    assertCurrentDatabase(d);
    expect(d.updates.duration).toBe(4);
    const [p] = d.updates.pending;
    expect(p.deadline).toBeNull();
    expect(p.description).toMatch(/engine/);
    const planned = new Date(`${p.planned_for}Z`);
    expect(planned.getUTCDay()).toBe(3);
    expect(planned.getUTCHours()).toBe(5);
    expect(planned.getTime()).toBeGreaterThan(Date.now());
    expect(planned.getTime() - Date.now()).toBeLessThanOrEqual(7 * 24 * 3_600_000);
    agent.setPatchPending(id, false);
    await until('pending update gone', async () => ((await api.req('GET', `${MYSQL}/${id}`)).body.updates.pending.length === 0 ? true : undefined));
  });

  it('accepts a maintenance duration of 4 hours, as today\'s clients send, and refuses 5', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'cur-window', region: 'us-east', type: 'g6-nanode-1', engine } });
    const id = created.body.id as number;
    await waitStatus(api, id, 'active');
    // Shaped as the Terraform provider sends it: no week_of_month for a weekly window.
    const put = await api.req('PUT', `${MYSQL}/${id}`, { body: { updates: { day_of_week: 4, duration: 4, frequency: 'weekly', hour_of_day: 16 } } });
    expect(put.status).toBe(200);
    assertCurrentDatabase(put.body);
    expect(put.body.updates).toMatchObject({ day_of_week: 4, duration: 4, frequency: 'weekly', hour_of_day: 16, week_of_month: null });
    await waitStatus(api, id, 'active');
    expect(agent.desired()!.databases.find((x) => Number(x.id) === id)!.updates!.duration).toBe(4);
    const bad = await api.req('PUT', `${MYSQL}/${id}`, { body: { updates: { duration: 5 } } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([{ field: 'updates.duration', reason: 'duration must be an integer from 1 to 4' }]);
  });

  it('describes engine_config at /databases/mysql/config on both prefixes', async () => {
    for (const prefix of ['/v4', '/v4beta']) {
      const r = await api.req('GET', `${prefix}/databases/mysql/config`, { token: null });
      expect(r.status).toBe(200);
      assertCurrentConfig(r.body);
      expect(r.body.mysql.innodb_ft_min_token_size).toMatchObject({ minimum: 0, maximum: 16, requires_restart: true, type: 'integer' });
      expect(r.body.binlog_retention_period).toMatchObject({ minimum: 600, maximum: 86400 });
    }
  });

  it('takes engine_config on create and PUT, merged and stored, sends the agent MariaDB variables, and refuses bad keys by name', async () => {
    const created = await api.req('POST', MYSQL, {
      body: { label: 'cur-config', region: 'us-east', type: 'g6-nanode-1', engine, engine_config: { binlog_retention_period: 900, mysql: { connect_timeout: 20, innodb_ft_min_token_size: 2 } } },
    });
    expect(created.status).toBe(200);
    assertCurrentDatabase(created.body);
    const id = created.body.id as number;
    expect(created.body.engine_config).toEqual({ binlog_retention_period: 900, mysql: { connect_timeout: 20, innodb_ft_min_token_size: 2 } });
    await waitStatus(api, id, 'active');
    const desired = () => agent.desired()!.databases.find((x) => Number(x.id) === id)!;
    expect(desired().restartOptions).toEqual({ innodb_ft_min_token_size: '2' });
    expect(desired().dynamicOptions).toEqual({ connect_timeout: '20' });

    const put = await api.req('PUT', `${MYSQL}/${id}`, { body: { engine_config: { mysql: { innodb_ft_min_token_size: 4, sql_require_primary_key: true, connect_timeout: null } } } });
    expect(put.status).toBe(200);
    expect(put.body.status).toBe('updating');
    expect(put.body.engine_config).toEqual({ binlog_retention_period: 900, mysql: { innodb_ft_min_token_size: 4, sql_require_primary_key: true } });
    const done = await waitStatus(api, id, 'active');
    assertCurrentDatabase(done);
    expect(desired().restartOptions).toEqual({ innodb_ft_min_token_size: '4' });
    expect(desired().dynamicOptions).toEqual({ innodb_force_primary_key: 'ON' });

    const bad = await api.req('PUT', `${MYSQL}/${id}`, { body: { engine_config: { mysql: { innodb_ft_min_token_size: 17, internal_tmp_mem_storage_engine: 'TempTable' } } } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([
      { field: 'engine_config.mysql.innodb_ft_min_token_size', reason: 'innodb_ft_min_token_size must be from 0 to 16' },
      { field: 'engine_config.mysql.internal_tmp_mem_storage_engine', reason: expect.stringMatching(/^internal_tmp_mem_storage_engine cannot be set on these servers: /) },
    ]);
    const badCreate = await api.req('POST', MYSQL, { body: { label: 'cur-config-2', region: 'us-east', type: 'g6-nanode-1', engine, engine_config: { mysql: { wait_timeout: 0 } } } });
    expect(badCreate.status).toBe(400);
    expect(badCreate.body.errors).toEqual([{ field: 'engine_config.mysql.wait_timeout', reason: 'wait_timeout must be from 1 to 2147483' }]);
    // A fork needs a source with a point in time to restore (this scripted agent archives no
    // binlogs), and a restore_time clients can send; a private network is refused by name.
    const fork = await api.req('POST', MYSQL, { body: { label: 'cur-fork', region: 'us-east', type: 'g6-nanode-1', engine, fork: { source: id, restore_time: '2026-01-01T00:00:00' }, private_network: null } });
    expect(fork.status).toBe(400);
    expect(fork.body.errors).toEqual([{ field: 'fork.source', reason: 'fork.source has no point in time to restore yet (its oldest_restore_time is null)' }]);
    const badFork = await api.req('POST', MYSQL, { body: { label: 'cur-fork', region: 'us-east', type: 'g6-nanode-1', engine, fork: { source: 'x', restore_time: 'yesterday' } } });
    expect(badFork.body.errors).toEqual([
      { field: 'fork.restore_time', reason: 'fork.restore_time must be a UTC date and time such as 2026-01-02T03:04:05' },
      { field: 'fork.source', reason: 'fork.source must be the id of a MySQL database you can read' },
    ]);
    const notObject = await api.req('POST', MYSQL, { body: { label: 'cur-fork', region: 'us-east', type: 'g6-nanode-1', engine, fork: 7 } });
    expect(notObject.body.errors).toEqual([{ field: 'fork', reason: 'fork must be an object with source and restore_time' }]);
    const vpc = await api.req('PUT', `${MYSQL}/${id}`, { body: { private_network: { vpc_id: 1, subnet_id: 2, public_access: true } } });
    expect(vpc.body.errors).toEqual([{ field: 'private_network', reason: 'private_network is not supported yet' }]);
  });

  it('takes PUTs shaped as linodego and the Terraform provider send them: type is a resize, version an upgrade, cluster_size a scale', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'cur-put', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, engine_config: { mysql: { wait_timeout: 600 } } } });
    const id = created.body.id as number;
    let d = await waitStatus(api, id, 'active');
    const desired = () => agent.desired()!.databases.find((x) => Number(x.id) === id)!;
    // Terraform sends what it holds: unchanged values of every field are no change.
    const same = await api.req('PUT', `${MYSQL}/${id}`, {
      body: { label: d.label, allow_list: d.allow_list, type: d.type, cluster_size: 3, version: d.version, engine_config: d.engine_config,
        updates: { day_of_week: d.updates.day_of_week, duration: d.updates.duration, frequency: d.updates.frequency, hour_of_day: d.updates.hour_of_day } },
    });
    expect(same.status).toBe(200);
    expect(same.body.status).toBe('active');
    assertCurrentDatabase(same.body);

    // linodego's MySQLUpdateOptions with only Type set.
    const resize = await api.req('PUT', `${MYSQL}/${id}`, { body: { type: 'g6-standard-1' } });
    expect(resize.status).toBe(200);
    expect(resize.body).toMatchObject({ status: 'resizing', type: 'g6-standard-1', total_disk_size_gb: 50 });
    assertCurrentDatabase(resize.body);
    d = await waitStatus(api, id, 'active');
    expect(desired().type).toMatchObject({ id: 'g6-standard-1', memoryMb: 2048 });
    expect((await eventsFor(api, id, 'database_resize'))[0]).toMatchObject({ status: 'finished' });

    const upgrade = await api.req('PUT', `${MYSQL}/${id}`, { body: { version: '99.0.1' } });
    expect(upgrade.status).toBe(200);
    expect(upgrade.body).toMatchObject({ status: 'updating', version: '99.0.1' });
    assertCurrentDatabase(upgrade.body);
    d = await waitStatus(api, id, 'active');
    expect(desired()).toMatchObject({ engineId: NEWER, version: '99.0.1' });
    // Terraform waits for database_update after an engine_id change.
    expect((await eventsFor(api, id, 'database_update'))[0]).toMatchObject({ status: 'finished' });

    // A PUT that resizes and updates records both events, each finished once it has converged:
    // Terraform waits for both.
    const both = await api.req('PUT', `${MYSQL}/${id}`, { body: { type: 'g6-standard-2', label: 'cur-put-2' } });
    expect(both.body.status).toBe('resizing');
    await waitStatus(api, id, 'active');
    expect((await eventsFor(api, id, 'database_resize'))[0]).toMatchObject({ status: 'finished' });
    expect((await eventsFor(api, id, 'database_update'))[0]).toMatchObject({ status: 'finished', entity: { label: 'cur-put-2' } });
    expect((await eventsFor(api, id, 'database_update')).every((e: any) => e.status === 'finished')).toBe(true);

    const bad = await api.req('PUT', `${MYSQL}/${id}`, { body: { cluster_size: 1, version: '1.0.0' } });
    expect(bad.status).toBe(400);
    expect(bad.body.errors).toEqual([
      { field: 'version', reason: 'version 1.0.0 is not available; see /databases/engines for the versions offered' },
    ]);
    expect(desired()).toMatchObject({ clusterSize: 3 });
    // A version only another region's agent runs is not one this database's agent can move to.
    const other = startScriptedAgent(api.cp.grpcAddress, {
      id: 'agent-other', region: 'lab-local', engines: ['mysql/99.2.0'], credentials: await hostCredentials(api.cp, 'agent', 'agent-other', 'lab-local'),
    });
    try {
      await until('other engine offered', async () => ((await api.req('GET', '/v4/databases/engines', { token: null })).body.data.some((e: any) => e.id === 'mysql/99.2.0') || undefined));
      const elsewhere = await api.req('PUT', `${MYSQL}/${id}`, { body: { version: '99.2' } });
      expect(elsewhere.status).toBe(400);
      expect(elsewhere.body.errors).toEqual([{ field: 'version', reason: 'version 99.2 is not available; see /databases/engines for the versions offered' }]);
    } finally {
      other.close();
    }
    const down = await api.req('PUT', `${MYSQL}/${id}`, { body: { version: engine.split('/')[1] } });
    expect(down.status).toBe(400);
    expect(down.body.errors).toEqual([{ field: 'version', reason: 'version can only be upgraded from 99.0.1, not lowered' }]);
    expect((await api.req('PUT', `${MYSQL}/${id}`, { body: { cluster_size: 2 } })).body.errors).toEqual([{ field: 'cluster_size', reason: 'cluster_size must be 1 or 3' }]);

    // cluster_size as linodego's MySQLUpdateOptions sends it: a scale, shown and recorded as a resize.
    const down1 = await api.req('PUT', `${MYSQL}/${id}`, { body: { cluster_size: 1 } });
    expect(down1.status).toBe(200);
    expect(down1.body).toMatchObject({ status: 'resizing', cluster_size: 1, replication_type: 'none' });
    assertCurrentDatabase(down1.body);
    await until('one node desired', async () => desired().clusterSize === 1 || undefined);
    expect(desired()).toMatchObject({ clusterSize: 1, replicationType: 'none' });
    expect(desired().members.map((m) => m.index)).toEqual([1]);
    await waitStatus(api, id, 'active');
    expect((await eventsFor(api, id, 'database_resize'))[0]).toMatchObject({ status: 'finished' });
    const up3 = await api.req('PUT', `${MYSQL}/${id}`, { body: { cluster_size: 3 } });
    expect(up3.body).toMatchObject({ status: 'resizing', cluster_size: 3, replication_type: 'semi_synch' });
    await until('three nodes desired', async () => desired().clusterSize === 3 || undefined);
    expect(desired().members.map((m) => m.index)).toEqual([1, 2, 3]);
    await waitStatus(api, id, 'active');
    expect((await eventsFor(api, id, 'database_resize')).every((e: any) => e.status === 'finished')).toBe(true);
  });
  it('forks with restore_time as @linode/api-v4 sends it: placed on the source\'s agent, told the source and second, 400s naming the field', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'cur-fork-src', region: 'us-east', type: 'g6-nanode-1', engine, engine_config: { binlog_retention_period: 3600 } } });
    const source = created.body.id as number;
    await waitStatus(api, source, 'active');
    const desiredOf = (id: number) => agent.desired()!.databases.find((x) => Number(x.id) === id)!;
    expect(Number(desiredOf(source).binlogRetentionSeconds)).toBe(3600);
    expect((await api.req('GET', `${MYSQL}/${source}`)).body.oldest_restore_time).toBeNull();
    const oldest = Math.floor(Date.now() / 1000) * 1000 - 120_000;
    agent.setOldestRestore(source, oldest);
    const wire = (ms: number) => new Date(ms).toISOString().slice(0, 19);
    const shown = await until('oldest_restore_time shown', async () => (await api.req('GET', `${MYSQL}/${source}`)).body.oldest_restore_time ?? undefined);
    expect(shown).toBe(wire(oldest));

    const body = (over: Record<string, unknown>) => ({ label: 'cur-fork-1', region: 'us-east', type: 'g6-nanode-1', engine, ...over });
    const early = await api.req('POST', MYSQL, { body: body({ fork: { source, restore_time: wire(oldest - 1000) } }) });
    expect(early.status).toBe(400);
    expect(early.body.errors).toEqual([{ field: 'fork.restore_time', reason: expect.stringMatching(new RegExp(`^fork.restore_time must be from ${wire(oldest)} \\(oldest_restore_time\\) to `)) }]);
    const late = await api.req('POST', MYSQL, { body: body({ fork: { source, restore_time: wire(Date.now() + 60_000) } }) });
    expect(late.body.errors.map((e: any) => e.field)).toEqual(['fork.restore_time']);
    const otherEngine = await api.req('POST', MYSQL, { body: body({ engine: NEWER, fork: { source, restore_time: wire(oldest) } }) });
    expect(otherEngine.body.errors).toEqual([{ field: 'engine', reason: `A fork must use its source's engine ${engine}` }]);
    // The documented key, restore_time, as @linode/api-v4 (Cloud Manager) and curl users send it,
    // here in RFC 3339 with a zone; the API's own zoneless format works too (below). linodego and
    // the Terraform provider send another key: see the next test.
    const at = oldest + 60_000;
    const fork = await api.req('POST', MYSQL, { body: body({ cluster_size: 3, replication_type: 'semi_synch', fork: { source, restore_time: new Date(at).toISOString().replace('.000Z', '+00:00') } }) });
    expect(fork.status, JSON.stringify(fork.body)).toBe(200);
    assertCurrentDatabase(fork.body);
    expect(fork.body.fork).toEqual({ source, restore_time: wire(at) });
    const id = fork.body.id as number;
    const d = await waitStatus(api, id, 'active');
    assertCurrentDatabase(d);
    expect(d.fork).toEqual({ source, restore_time: wire(at) });
    const desired = desiredOf(id);
    expect(Number(desired.forkSource)).toBe(source);
    expect(Number(desired.forkRestoreMs)).toBe(at);
    // Every member on the source's agent: its storage holds the backups and binlogs.
    expect(desired.members.map((m) => [m.agentId, m.local])).toEqual([['agent-cur', true], ['agent-cur', true], ['agent-cur', true]]);
    expect(Number(desiredOf(source).forkSource)).toBe(0);
    const zoneless = await api.req('POST', MYSQL, { body: body({ label: 'cur-fork-0', fork: { source, restore_time: wire(at - 1000) } }) });
    expect(zoneless.status, JSON.stringify(zoneless.body)).toBe(200);
    expect(zoneless.body.fork).toEqual({ source, restore_time: wire(at - 1000) });

    // Cloud Manager's fork body: only fork, region and private_network. Engine, type, cluster
    // size and replication come from the source; the label is chosen (docs/databases.md).
    const minimal = await api.req('POST', MYSQL, { body: { fork: { source, restore_time: wire(at) }, region: 'us-east', private_network: null } });
    expect(minimal.status, JSON.stringify(minimal.body)).toBe(200);
    expect(minimal.body).toMatchObject({ label: 'cur-fork-src-fork', engine: 'mysql', type: 'g6-nanode-1', cluster_size: 1, replication_type: 'none' });
    const again = await api.req('POST', MYSQL, { body: { fork: { source, restore_time: wire(at) }, region: 'us-east' } });
    expect(again.body.label).toBe('cur-fork-src-fork-2');
    // Cloud Manager's list: X-Filter on platform, sorted by created or cluster_size.
    for (const path of ['/v4/databases/instances', MYSQL]) {
      const bySize = await api.req('GET', path, { headers: { 'x-filter': JSON.stringify({ platform: 'rdbms-default', '+order_by': 'cluster_size', '+order': 'desc' }) } });
      expect(bySize.status, JSON.stringify(bySize.body)).toBe(200);
      expect(bySize.body.data[0].cluster_size).toBe(3);
      expect(bySize.body.data.map((x: any) => x.id)).toContain(minimal.body.id);
      const byCreated = await api.req('GET', path, { headers: { 'x-filter': JSON.stringify({ platform: 'rdbms-default', '+order_by': 'created', '+order': 'desc' }) } });
      expect(byCreated.body.data.map((x: any) => x.created)).toEqual(byCreated.body.data.map((x: any) => x.created).sort().reverse());
      expect((await api.req('GET', path, { headers: { 'x-filter': JSON.stringify({ platform: 'rdbms-legacy' }) } })).body.results).toBe(0);
    }
  });

  it('forks with the bodies linodego and the Terraform provider really send: the time under "-", or none for the latest second', async () => {
    const created = await api.req('POST', MYSQL, { body: { label: 'cur-fork-src2', region: 'us-east', type: 'g6-nanode-1', engine } });
    const source = created.body.id as number;
    await waitStatus(api, source, 'active');
    const oldest = Math.floor(Date.now() / 1000) * 1000 - 120_000;
    agent.setOldestRestore(source, oldest);
    await until('oldest_restore_time shown', async () => (await api.req('GET', `${MYSQL}/${source}`)).body.oldest_restore_time ?? undefined);
    const wire = (ms: number) => new Date(ms).toISOString().slice(0, 19);
    const desiredOf = (id: number) => agent.desired()!.databases.find((x) => Number(x.id) === id)!;
    const post = async (raw: string) => api.req('POST', MYSQL, { rawBody: raw });
    const checkFork = async (r: Awaited<ReturnType<typeof post>>, restoreMs: number) => {
      expect(r.status, JSON.stringify(r.body)).toBe(200);
      assertCurrentDatabase(r.body);
      expect(r.body.fork).toEqual({ source, restore_time: wire(restoreMs) });
      const id = r.body.id as number;
      await until('fork desired', async () => desiredOf(id) ?? undefined);
      expect(Number(desiredOf(id).forkSource)).toBe(source);
      expect(Number(desiredOf(id).forkRestoreMs)).toBe(restoreMs);
      const d = await waitStatus(api, id, 'active');
      assertCurrentDatabase(d);
      expect(d.fork).toEqual({ source, restore_time: wire(restoreMs) });
    };

    // linodego v2's MySQLCreateOptions with Fork{Source, RestoreTime} set, as encoding/json writes
    // it: DatabaseFork tags RestoreTime `json:"-,omitzero"`, so the key is "-", the value RFC 3339
    // in the time's own zone (UTC here: a Z); unset fields are left out (omitzero).
    const at = oldest + 30_000;
    const goTime = new Date(at).toISOString().replace('.000Z', 'Z');
    await checkFork(await post(`{"label":"cur-fork-go","region":"us-east","type":"g6-nanode-1","engine":"${engine}","fork":{"source":${source},"-":"${goTime}"}}`), at);

    // The Terraform provider (linodego v1's `json:"-,omitempty"`: the same key) with
    // fork_restore_time = "...+02:00": Go keeps the zone it parsed. It always sends cluster_size
    // (default 1) and an engine_config with an empty mysql object.
    const at2 = oldest + 45_000;
    const plus2 = new Date(at2 + 2 * 3_600_000).toISOString().replace('.000Z', '+02:00');
    await checkFork(await post(`{"label":"cur-fork-tf","region":"us-east","type":"g6-nanode-1","engine":"${engine}","cluster_size":1,"fork":{"source":${source},"-":"${plus2}"},"engine_config":{"mysql":{}}}`), at2);

    // The provider's own fork example sets only fork_source: no time at all, so the fork is of the
    // latest second, the one the request arrived in, and that second is what the fork records.
    const before = Math.floor(Date.now() / 1000) * 1000;
    const latest = await post(`{"label":"cur-fork-tf2","region":"us-east","type":"g6-nanode-1","engine":"${engine}","cluster_size":1,"fork":{"source":${source}},"engine_config":{"mysql":{}}}`);
    const after = Date.now();
    expect(latest.status, JSON.stringify(latest.body)).toBe(200);
    const recorded = Date.parse(`${latest.body.fork.restore_time}Z`);
    expect(recorded).toBeGreaterThanOrEqual(before);
    expect(recorded).toBeLessThanOrEqual(after);
    await checkFork(latest, recorded);
    // The agent is told to replay through the end of that second (the request came within it).
    expect(desiredOf(latest.body.id as number).forkThroughSecond).toBe(true);
    expect(desiredOf(Number((await api.req('GET', MYSQL)).body.data.find((x: any) => x.label === 'cur-fork-go').id)).forkThroughSecond).toBe(false);

    // Bad values under "-" are refused like bad restore_time values, naming fork.restore_time.
    for (const bad of ['"yesterday"', '1767225601', `"${wire(oldest - 1000)}Z"`, `"${wire(Date.now() + 60_000)}Z"`]) {
      const r = await post(`{"label":"cur-fork-bad","region":"us-east","type":"g6-nanode-1","engine":"${engine}","fork":{"source":${source},"-":${bad}}}`);
      expect(r.status, bad).toBe(400);
      expect(r.body.errors.map((e: any) => e.field), bad).toEqual(['fork.restore_time']);
    }
  });
});
