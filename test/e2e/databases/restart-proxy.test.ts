// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, waitStatus, type DbLab } from './db-lab.js';

/**
 * A member that restarts (here: every member, one after another, in a resize's rolling restart)
 * accepts the data plane's PROXY headers from its first connection (docs/databases.md, "Who may
 * send PROXY headers to a member"). Before, it came back with the option file's `localhost` only
 * and answered every client the data plane sent it "Proxy header is not accepted" (or, after a
 * TLS request, bytes the client read as a broken TLS record) until the agent's next SET GLOBAL:
 * 47 to 126 such refusals through hosts.secondary in each of eight resizes measured. The data
 * plane cannot send such a client elsewhere: the server greets it before it reads the header.
 * Other refusals while members restart (a stopped member, the switchover) are not this test's.
 */
describe('a restarted member serves the data plane at once (process runtime)', () => {
  let lab: DbLab;
  let engine: string;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };

  beforeAll(async () => {
    lab = await startDbLab('restartproxy');
    await lab.startAgent();
    engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, DEFAULT_SERIES);
  }, 180_000);
  afterAll(async () => {
    await lab?.close();
  });

  it('no client is refused for its PROXY header while a resize restarts every member', async () => {
    const created = await ok('POST', MYSQL, { label: 'rp-three', region: 'us-east', type: 'g6-nanode-1', engine, cluster_size: 3, replication_type: 'semi_synch', allow_list: ['0.0.0.0/0'] });
    const db = await waitStatus(lab, created.id, 'active', 120_000);
    const { password } = await ok('GET', `${MYSQL}/${db.id}/credentials`);
    const ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    let stop = false;
    const errors: string[] = [];
    let probes = 0;
    const prober = (host: string) => (async () => {
      while (!stop) {
        probes++;
        try {
          const c = await connectFrom({ source: '127.0.0.2', host, port: 3306, user: 'linroot', password, ca });
          try {
            await c.query('SELECT 1');
          } finally {
            await c.end().catch(() => undefined);
          }
        } catch (err) {
          errors.push((err as Error).message);
        }
      }
    })();
    const runs = [prober(db.hosts.secondary), prober(db.hosts.primary)];
    try {
      expect(await ok('PUT', `${MYSQL}/${db.id}`, { type: 'g6-standard-1' })).toMatchObject({ status: 'resizing' });
      await waitStatus(lab, db.id, 'active', 180_000);
    } finally {
      stop = true;
      await Promise.all(runs);
    }
    // Every member did restart (the resize's limits are in each one's spec).
    expect((await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`)).map((n) => n.memoryMb)).toEqual([2048, 2048, 2048]);
    expect(probes).toBeGreaterThan(50);
    const proxyRefusals = errors.filter((e) => /Proxy header is not accepted|wrong version number/.test(e));
    console.log(`${probes} probes, ${errors.length} refused while resizing`, [...new Set(errors)]);
    expect(proxyRefusals).toEqual([]);
  }, 300_000);
});
