// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, until, type DbLab } from './db-lab.js';

/**
 * `active` waits for the data planes (docs/databases.md, "When a database is active"): a real
 * control plane, a real data plane with two worker processes (`fulcrum dataplane` workers; the
 * lab's process is their primary) and a `fulcrum agent` running MariaDB as a process. One of the
 * data plane's workers is stopped (SIGSTOP) as the database is created, so the data plane's
 * primary keeps its config stream (and answers the control plane's keepalive) but cannot ACK a
 * snapshot: it ACKs once every worker applied it (docs/dataplane.md, "Workers"). The workers'
 * heartbeat and apply timeout are raised so that the stopped worker is not replaced meanwhile
 * (by default after 5 s of silence, whose replacement would apply the snapshot). The agent reports the member
 * running; the status stays `provisioning` over several more of its reports. Once the worker
 * runs again the data plane applies the routes, the status reads `active`, and connections begun
 * at the first `active` through both endpoints are all served. Before, the status read `active`
 * as soon as the agent reported the member running, with the data plane not routing there.
 */
describe('a database reads active only once the data plane routes to it', () => {
  let lab: DbLab;
  let engine: string;
  const workerPids = () => lab.dataplane.workers().filter((w) => !w.draining).map((w) => w.pid);

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };

  beforeAll(async () => {
    lab = await startDbLab('activewait', 'process', { dataplane: { workers: 2, workerApplyTimeoutMs: 300_000, workerHeartbeat: { intervalMs: 1000, misses: 300 } } });
    await lab.startAgent();
    engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, DEFAULT_SERIES);
    await until('the data plane connected with its workers', async () => {
      const dps = (await ok('GET', '/v4/fulcrum/dataplanes')).data as any[];
      return dps.some((d) => d.id === `${lab.agentId}-dp` && d.connected) && workerPids().length === 2 ? true : undefined;
    }, 120_000, 100).catch(async (err: Error) => {
      throw new Error(`${err.message}; data planes: ${JSON.stringify((await ok('GET', '/v4/fulcrum/dataplanes')).data)}; workers: ${workerPids()}`);
    });
  }, 240_000);
  afterAll(async () => {
    for (const pid of lab ? workerPids() : []) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch { /* gone */ }
    }
    await lab?.close();
  });

  it('stays provisioning while the data plane cannot apply, then active with every client served', async () => {
    const [worker] = workerPids();
    process.kill(worker!, 'SIGSTOP');
    let stopped = true;
    const created = await ok('POST', MYSQL, { label: 'aw-one', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 1, allow_list: ['0.0.0.0/0'] });

    // Every status read, with whether the worker was stopped when it was read.
    const seen: { status: string; stopped: boolean; atMs: number }[] = [];
    const read = async () => {
      const s = (await ok('GET', `${MYSQL}/${created.id}`)).status as string;
      seen.push({ status: s, stopped, atMs: Date.now() });
      return s;
    };

    // The agent runs the member and reports it (the database's members are known; its host
    // lists the member running); then three more of its reports go by. Before, the first of
    // those made the database active.
    const agentNow = async () => ((await ok('GET', '/v4/fulcrum/agents')).data as any[]).find((a) => a.id === lab.agentId);
    await until('the member running and reported', async () => {
      await read();
      const db = await ok('GET', `${MYSQL}/${created.id}`);
      const a = await agentNow();
      const running = (a?.members ?? []).some((m: any) => m.databaseId === created.id && m.status === 'running');
      return running && Object.keys(db.members ?? {}).length > 0 ? true : undefined;
    }, 180_000, 100);
    let reports = 0;
    let last = (await agentNow()).lastSeen as number;
    await until('three more agent reports', async () => {
      await read();
      const now = (await agentNow()).lastSeen as number;
      if (now > last) {
        reports++;
        last = now;
      }
      return reports >= 3 ? true : undefined;
    }, 60_000, 100);
    const held = seen.filter((s) => s.stopped);
    expect(held.length).toBeGreaterThan(0);
    if (held.some((s) => s.status !== 'provisioning')) {
      console.log(JSON.stringify((await ok('GET', '/v4/fulcrum/dataplanes')).data));
    }
    expect(held.filter((s) => s.status !== 'provisioning'), 'status while the data plane could not apply').toEqual([]);

    // The worker runs again: the data plane applies, the database reads active, and clients that
    // connect at once are all served.
    const resumedAt = Date.now();
    process.kill(worker!, 'SIGCONT');
    stopped = false;
    const db = await until('active', async () => ((await read()) === 'active' ? ok('GET', `${MYSQL}/${created.id}`) : undefined), 60_000, 20);
    const activeAt = Date.now();
    // Credentials and the CA are given once provisioning is over: read at once, as a client would.
    const { password } = await ok('GET', `${MYSQL}/${created.id}/credentials`);
    const ca = Buffer.from((await ok('GET', `${MYSQL}/${created.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    const attempt = async (host: string) => {
      try {
        const c = await connectFrom({ source: '127.0.0.2', host, port: 3306, user: 'linroot', password, ca });
        try {
          await c.query('SELECT 1');
        } finally {
          await c.end().catch(() => undefined);
        }
        return null;
      } catch (err) {
        return `${host}: ${(err as Error).message}`;
      }
    };
    const results = await Promise.all([db.hosts.primary, db.hosts.secondary].flatMap((h: string) => Array.from({ length: 5 }, () => attempt(h))));
    console.log(`active ${activeAt - resumedAt} ms after the worker ran again; held provisioning over ${held.length} reads; connections at the first active: ${results.length}`);
    expect(results.filter((r) => r !== null), 'refusals at the first active').toEqual([]);
    expect(seen.filter((s) => s.stopped && s.status === 'active')).toEqual([]);
  }, 400_000);
});
