import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, repoRoot, testRateLimits, until } from '../helpers/lab.js';
import { createHosts, leftovers, watch, type Host, type HostNet, type HostProcess } from '../helpers/hosts.js';

// Database endpoints that outlive a host (docs/multi-host.md, "Database endpoints in a pair"):
// hosts.primary is served by a pair of data planes, its address held through keepalived. On
// network-namespace hosts (control plane, two data planes, an agent running mariadbd as
// processes, a client), a 1-node database is created through the API and written with mysql2
// from the client host through hosts.primary. Then the agent on the database's host is SIGKILLed
// (its mariadbd keeps running) and, during the client's write loop, the data plane holding the
// endpoint address is SIGKILLed: writes succeed again through hosts.primary (the gap is printed)
// and no acknowledged row is lost. Everything is removed afterwards.

const PREFIX = 'fhdbx';
const SUBNET = 157;
const NB_POOL = '198.18.156.0/24';
const DB_POOL = '198.18.157.0/24';
/** The addresses the agent's members listen on: put on the agent host's link, as an operator would. */
const NODE_POOL = '198.18.158.0/29';
const NODE_ADDRESSES = ['198.18.158.1', '198.18.158.2', '198.18.158.3', '198.18.158.4', '198.18.158.5', '198.18.158.6'];
const MYSQL = '/v4/databases/mysql/instances';
const LIMIT_FLAGS = ['--api-rate-limit', String(testRateLimits.perToken), '--api-ip-rate-limit', String(testRateLimits.perIp), '--api-stats-rate-limit', String(testRateLimits.stats)];

/**
 * mysql2 inside the client host. `sql` mode runs the statements in argv and prints the last
 * result as JSON; `loop` mode inserts ids 1, 2, ... into fh.t, a new TLS connection per insert
 * every 200 ms, one JSON line per attempt (an insert is acknowledged when the line says ok).
 */
const CLIENT = `
const mysql = require('mysql2/promise');
const { DB_HOST: host, DB_USER: user, DB_PASSWORD: password, DB_CA: ca } = process.env;
const [mode, ...stmts] = process.argv.slice(1);
const open = () => mysql.createConnection({ host, port: 3306, user, password, ssl: { ca, rejectUnauthorized: true }, connectTimeout: 2000 });
function within(ms, p) { return Promise.race([p, new Promise((_, no) => setTimeout(() => no(new Error('timeout')), ms))]); }
async function sql() {
  const c = await open();
  let last;
  for (const s of stmts) [last] = await c.query(s);
  await c.end();
  console.log(JSON.stringify(last));
}
async function loop() {
  for (let id = 1; ; id++) {
    const start = Date.now();
    let c;
    try {
      c = await within(4000, open());
      await within(4000, c.query('INSERT INTO fh.t (id) VALUES (?)', [id]));
      console.log(JSON.stringify({ id, start, end: Date.now(), ok: true }));
    } catch (e) {
      console.log(JSON.stringify({ id, start, end: Date.now(), ok: false, err: e.code || e.message }));
    }
    if (c) c.destroy();
    await new Promise((r) => setTimeout(r, 200));
  }
}
(mode === 'loop' ? loop() : sql()).catch((e) => { console.error(e.code || e.message); process.exit(2); });
`;

interface Attempt { id: number; start: number; end: number; ok: boolean; err?: string }

function attempts(p: HostProcess): Attempt[] {
  return p.output().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Attempt);
}

async function holds(h: Host, ip: string): Promise<boolean> {
  return (await h.exec('ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.includes(` ${ip}/32 `);
}

async function listensOn(h: Host, ip: string, port: number): Promise<boolean> {
  return (await h.exec('ss', ['-Hltn', `src ${ip}:${port}`])).stdout.includes(`${ip}:${port}`);
}

async function processesIn(h: Host): Promise<string[]> {
  const { stdout } = await h.exec('sh', ['-c', 'for p in $(ip netns pids "$1"); do cat /proc/$p/comm 2>/dev/null; done', 'sh', h.ns]);
  return stdout.split('\n').filter(Boolean);
}

describe('database endpoints on a data plane pair', () => {
  let net: HostNet;
  let dir: string;
  let call: ReturnType<typeof api>;
  let grpc: string;
  const procs: Record<string, HostProcess> = {};
  let cpHost: Host, dpa: Host, dpb: Host, ag: Host, cl: Host;

  const token = async (role: 'dataplane' | 'agent', h: Host): Promise<string> => {
    const t = await call('POST', '/v4/fulcrum/join-tokens', { role, id: h.name, region: 'us-east' });
    expect(t.status).toBe(200);
    return t.body.token as string;
  };

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-fhdbx-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp', 'dpa', 'dpb', 'ag', 'cl'] });
    [cpHost, dpa, dpb, ag, cl] = net.hosts as [Host, Host, Host, Host, Host];
    for (const ip of NODE_ADDRESSES) await ag.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'eth0']);

    const cpState = join(dir, 'cp');
    procs.cp = cpHost.fulcrum(['control-plane', '--state', cpState, '--api-host', cpHost.ip, '--api-port', '0', '--grpc-host', cpHost.ip, '--grpc-port', '0',
      '--nodebalancer-pool', `us-east=${NB_POOL}`, '--database-pool', `us-east=${DB_POOL}`, ...LIMIT_FLAGS]);
    const info = await until('control-plane.json', () => {
      if (procs.cp!.proc.exitCode !== null) throw new Error(`control plane exited: ${procs.cp!.output()}`);
      try {
        return JSON.parse(readFileSync(join(cpState, 'control-plane.json'), 'utf8')) as { apiUrl: string; grpcAddress: string };
      } catch {
        return undefined;
      }
    }, 120_000, 200);
    grpc = info.grpcAddress;
    call = api(info.apiUrl, readFileSync(join(cpState, 'admin-token'), 'utf8').trim());

    // Both data planes join before the database exists, so the members accept PROXY headers from both.
    for (const [h, peer, prio] of [[dpa, dpb, 150], [dpb, dpa, 100]] as const) {
      procs[h.name] = h.fulcrum(['dataplane', '--control-plane', grpc, '--state', join(dir, h.name), '--join', await token('dataplane', h),
        '--endpoint-source', h.ip, '--vrrp-interface', 'eth0', '--vrrp-peers', peer.ip, '--vrrp-priority', String(prio)]);
    }
    procs.ag = ag.fulcrum(['agent', '--control-plane', grpc, '--state', join(dir, 'ag'), '--runtime', 'process', '--join', await token('agent', ag), '--node-pool', NODE_POOL]);
  }, 300_000);

  afterAll(async () => {
    for (const p of Object.values(procs)) await p.stop();
    await net?.teardown();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps hosts.primary writable from the client host when the agent and then the data plane holding the address are SIGKILLed, and leaves nothing behind', async () => {
    const agents = await until('the agent offers an engine', async () => {
      const r = await call('GET', '/v4/fulcrum/agents');
      return (r.body.data as any[]).find((a) => a.id === 'ag' && a.engines?.length > 0);
    }, 120_000, 500);
    const created = await call('POST', MYSQL, { label: 'fhdbx-one', region: 'us-east', type: 'g6-nanode-1', engine: agents.engines[0].id, allow_list: [`${cl.ip}/32`] });
    expect(created.status).toBe(200);
    const id: number = created.body.id;
    const db = await until('the database is active', async () => {
      const r = await call('GET', `${MYSQL}/${id}`);
      if (r.body.status === 'failed') throw new Error(`database failed: ${procs.ag!.output().slice(-4000)}`);
      return r.body.status === 'active' ? r.body : undefined;
    }, 480_000, 500);
    const primary: string = db.hosts.primary;
    expect(primary.startsWith('198.18.157.')).toBe(true);

    const creds = (await call('GET', `${MYSQL}/${id}/credentials`)).body as { username: string; password: string };
    const ca = Buffer.from((await call('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate, 'base64').toString('utf8');
    const env = { ...process.env, DB_HOST: primary, DB_USER: creds.username, DB_PASSWORD: creds.password, DB_CA: ca };
    /** Runs statements with mysql2 inside the client host; the last result, or undefined on failure. */
    const sql = async (...stmts: string[]): Promise<any> => {
      const r = await new Promise<{ code: number | null; out: string }>((ok) => {
        const p = watch(cl.spawn(process.execPath, ['-e', CLIENT, 'sql', ...stmts], { cwd: repoRoot, env }));
        p.proc.once('exit', (code) => setTimeout(() => ok({ code, out: p.output() }), 50));
      });
      return r.code === 0 ? JSON.parse(r.out.trim().split('\n').at(-1)!) : undefined;
    };

    // Both data planes listen on the endpoint (the standby through nonlocal bind), one holds it.
    await until('both data planes listen on hosts.primary', async () => (await listensOn(dpa, primary, 3306)) && (await listensOn(dpb, primary, 3306)), 120_000, 250);
    const holder = await until('one data plane holds hosts.primary', async () => {
      const [a, b] = [await holds(dpa, primary), await holds(dpb, primary)];
      return a !== b ? (a ? dpa : dpb) : undefined;
    }, 60_000, 200);
    const other = holder === dpa ? dpb : dpa;

    // Written from the client host through hosts.primary; the member trusts both data planes' PROXY headers.
    await until('a table through hosts.primary', () => sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
    await until('the member accepts PROXY headers from both data planes', async () => {
      const rows = await sql('SELECT @@global.proxy_protocol_networks AS n');
      const n = String(rows?.[0]?.n ?? '');
      return n.includes(dpa.ip) && n.includes(dpb.ip);
    }, 60_000, 1000);

    // The agent on the database's host dies; its mariadbd keeps running and serving.
    await procs.ag!.kill();
    delete procs.ag;
    expect((await processesIn(ag)).some((p) => /mariadbd|mysqld/.test(p))).toBe(true);

    const loop = watch(cl.spawn(process.execPath, ['-e', CLIENT, 'loop'], { cwd: repoRoot, env }));
    await until('writes succeed without the agent', () => attempts(loop).filter((a) => a.ok).length >= 3, 60_000, 100);

    // The data plane holding hosts.primary dies too.
    const killedAt = Date.now();
    await procs[holder.name]!.kill();
    delete procs[holder.name];
    const first = await until('a write begun after the SIGKILL succeeds', () => attempts(loop).find((a) => a.start > killedAt && a.ok), 60_000, 100);
    const failed = attempts(loop).filter((a) => a.start > killedAt - 1000 && a.start < first.start && !a.ok);
    console.log(`[db-endpoint-failover] SIGKILL of the agent, then of the data plane on ${holder.name}: writes through hosts.primary succeeded again after ${first.end - killedAt} ms (${failed.length} failed attempts in between: ${[...new Set(failed.map((a) => a.err))].join(', ')})`);
    expect(await holds(other, primary)).toBe(true);
    const okAfter = Date.now();
    await until('writes keep succeeding', () => attempts(loop).filter((a) => a.start > okAfter && a.ok).length >= 3, 60_000, 100);
    await loop.kill();

    // No acknowledged row is lost.
    const acked = attempts(loop).filter((a) => a.ok).map((a) => a.id);
    const rows = await until('the rows read back', () => sql('SELECT id FROM fh.t ORDER BY id'), 60_000, 1000);
    const stored = new Set((rows as { id: number }[]).map((r) => r.id));
    expect(acked.filter((i) => !stored.has(i))).toEqual([]);

    for (const [name, p] of Object.entries(procs)) {
      await p.stop();
      delete procs[name];
    }
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
  }, 900_000);
});
