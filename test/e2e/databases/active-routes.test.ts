// e2e-lane: concurrent (startDbLab: port 0, its own 127.76/78/79 blocks and temp folders).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_SERIES, engineOfSeries } from '../../helpers/engines.js';
import { MYSQL, connectFrom, startDbLab, waitStatus, type DbLab } from './db-lab.js';

/**
 * "active" means a client can connect (docs/databases.md, "When a database is active"). Clients
 * such as Terraform's provider and `linode-cli --wait` poll for `active` and connect at once,
 * so every connection begun after the API first said `active` again must get the server's
 * handshake and answer a query, through hosts.primary and hosts.secondary alike. Probes run
 * through both endpoints the whole time a resize restarts every member; each records the status
 * the API had last answered before the probe began.
 *
 * The same probes show that a member that restarts accepts the data plane's PROXY headers from
 * its first connection (docs/databases.md, "Who may send PROXY headers to a member"). Before, it
 * came back with the option file's `localhost` only and answered every client the data plane
 * sent it "Proxy header is not accepted" (or, after a TLS request, bytes the client read as a
 * broken TLS record) until the agent's next SET GLOBAL: 47 to 126 such refusals through
 * hosts.secondary in each of eight resizes measured. The data plane cannot send such a client
 * elsewhere: the server greets it before it reads the header. Other refusals while members
 * restart (a stopped member, the switchover) are not counted against it.
 */
describe('active means both endpoints serve (process runtime)', () => {
  let lab: DbLab;
  let engine: string;

  const ok = async (method: string, path: string, body?: unknown) => {
    const r = await lab.api(method, path, body);
    if (r.status !== 200) throw new Error(`${method} ${path} -> ${r.status} ${JSON.stringify(r.body)}`);
    return r.body;
  };

  beforeAll(async () => {
    lab = await startDbLab('activeroute');
    await lab.startAgent();
    engine = engineOfSeries((await ok('GET', '/v4/fulcrum/agents')).data[0].engines, DEFAULT_SERIES);
  }, 180_000);
  afterAll(async () => {
    await lab?.close();
  });

  interface Probe { endpoint: string; status: string; startedMs: number; error?: string }

  /**
   * Resizes database `id` while probing both endpoints back to back (plus the status poll), and
   * keeps probing for `afterMs` once the API says `active`; returns every probe.
   */
  async function resizeWhileProbing(db: any, type: string, afterMs: number): Promise<Probe[]> {
    const { password } = await ok('GET', `${MYSQL}/${db.id}/credentials`);
    const ca = Buffer.from((await ok('GET', `${MYSQL}/${db.id}/ssl`)).ca_certificate, 'base64').toString('utf8');
    // Probes begun before the PUT count as the resize's: only an `active` read after it counts.
    let status = 'resizing';
    let polling = false;
    let activeAt = 0;
    let stop = false;
    const probes: Probe[] = [];
    const poll = (async () => {
      while (!stop) {
        if (polling) {
          const s = (await lab.api('GET', `${MYSQL}/${db.id}`)).body.status as string;
          if (s === 'active' && !activeAt) activeAt = Date.now();
          status = s;
        }
        await new Promise((r) => setTimeout(r, 50));
      }
    })();
    const prober = (endpoint: 'primary' | 'secondary') => (async () => {
      while (!stop) {
        const p: Probe = { endpoint, status, startedMs: Date.now() };
        try {
          const c = await connectFrom({ source: '127.0.0.2', host: db.hosts[endpoint], port: 3306, user: 'linroot', password, ca });
          try {
            await c.query('SELECT 1');
          } finally {
            await c.end().catch(() => undefined);
          }
        } catch (err) {
          p.error = (err as Error).message;
        }
        probes.push(p);
      }
    })();
    const runs = [poll, ...(db.hosts.secondary ? [prober('primary'), prober('secondary')] : [prober('primary')])];
    try {
      expect(await ok('PUT', `${MYSQL}/${db.id}`, { type })).toMatchObject({ status: 'resizing' });
      polling = true;
      await waitStatus(lab, db.id, 'active', 180_000);
      const until = Date.now() + afterMs;
      while (Date.now() < until || !activeAt) await new Promise((r) => setTimeout(r, 100));
    } finally {
      stop = true;
      await Promise.all(runs);
    }
    return probes;
  }

  const summary = (ps: Probe[]) => ps.map((p) => `${p.endpoint}@${p.status}: ${p.error ?? 'ok'}`);

  it.each([
    ['3 members, semi_synch', { cluster_size: 3, replication_type: 'semi_synch' }],
    ['1 member', {}],
  ] as [string, Record<string, unknown>][])('a resize of %s: every connection begun after `active` is served', async (label, shape) => {
    const created = await ok('POST', MYSQL, { label: `ar-${label.slice(0, 1)}`, region: 'us-east', type: 'g6-nanode-1', engine, allow_list: ['0.0.0.0/0'], ...shape });
    const db = await waitStatus(lab, created.id, 'active', 120_000);
    const probes = await resizeWhileProbing(db, 'g6-standard-1', 3_000);
    const after = probes.filter((p) => p.status === 'active');
    // The probes did run after `active`, through every endpoint.
    expect(new Set(after.map((p) => p.endpoint)).size).toBe(db.hosts.secondary ? 2 : 1);
    expect(after.length).toBeGreaterThan(5);
    expect(summary(after.filter((p) => p.error))).toEqual([]);
    // Every member did restart (the resize's limits are in each one's spec), and none of them
    // refused a client for its PROXY header on the way.
    const members = Number(shape.cluster_size ?? 1);
    expect((await lab.nodes()).filter((n) => n.name.includes(`-db${db.id}-`)).map((n) => n.memoryMb)).toEqual(Array(members).fill(2048));
    if (members === 3) expect(probes.filter((p) => /Proxy header is not accepted|wrong version number/.test(p.error ?? '')).map((p) => p.error)).toEqual([]);
    console.log(`${label}: ${probes.filter((p) => p.status !== 'active' && p.error).length} of ${probes.filter((p) => p.status !== 'active').length} probes refused while resizing, ${after.length} after active`,
      [...new Set(summary(probes.filter((p) => p.status !== 'active' && p.error)))]);
  }, 300_000);
});
