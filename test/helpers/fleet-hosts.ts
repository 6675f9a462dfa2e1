/**
 * A Fulcrum fleet on network-namespace hosts (test/helpers/hosts.ts): a control plane, data planes
 * in pair mode and process-runtime agents joined with join tokens, plus mysql2 and HTTP clients
 * that run inside a host. Every process is a real `fulcrum` process; `stopAll()` stops them.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { expect } from 'vitest';
import { api, repoRoot, testRateLimits, until } from './lab.js';
import { watch, type Host, type HostProcess } from './hosts.js';

export const MYSQL = '/v4/databases/mysql/instances';

export interface Fleet {
  call: ReturnType<typeof api>;
  grpc: string;
  procs: Record<string, HostProcess>;
  /** The control plane's process. */
  cp: HostProcess;
  /** Joins a data plane in pair mode on `h` (its own address as the endpoint source). */
  dataplane(h: Host, peers: Host[], priority: number): Promise<HostProcess>;
  /**
   * Joins a process-runtime agent on `h` whose members listen on `nodeAddresses` (a /29's six
   * usable addresses, put on the host's link as an operator would) from `nodePool`.
   */
  agent(h: Host, nodePool: string, nodeAddresses: string[], extraArgs?: string[]): Promise<HostProcess>;
  /** SIGTERM to every process still running (control plane last). */
  stopAll(): Promise<void>;
}

export async function startFleet(o: { cpHost: Host; dir: string; nbPool: string; dbPool: string; backendNetworks?: string }): Promise<Fleet> {
  const cpState = join(o.dir, 'cp');
  const procs: Record<string, HostProcess> = {};
  const cp = o.cpHost.fulcrum(['control-plane', '--state', cpState, '--api-host', o.cpHost.ip, '--api-insecure-listen', '--api-port', '0', '--grpc-host', o.cpHost.ip, '--grpc-port', '0',
    '--nodebalancer-pool', `us-east=${o.nbPool}`, '--database-pool', `us-east=${o.dbPool}`,
    ...(o.backendNetworks ? ['--backend-networks', o.backendNetworks] : []),
    '--api-rate-limit', String(testRateLimits.perToken), '--api-ip-rate-limit', String(testRateLimits.perIp), '--api-stats-rate-limit', String(testRateLimits.stats)]);
  const info = await until('control-plane.json', () => {
    if (cp.proc.exitCode !== null) throw new Error(`control plane exited: ${cp.output()}`);
    try {
      return JSON.parse(readFileSync(join(cpState, 'control-plane.json'), 'utf8')) as { apiUrl: string; grpcAddress: string };
    } catch {
      return undefined;
    }
  }, 120_000, 200);
  const call = api(info.apiUrl, readFileSync(join(cpState, 'admin-token'), 'utf8').trim());
  const grpc = info.grpcAddress;
  const token = async (role: 'dataplane' | 'agent', h: Host): Promise<string> => {
    const t = await call('POST', '/v4/fulcrum/join-tokens', { role, id: h.name, region: 'us-east' });
    expect(t.status).toBe(200);
    return t.body.token as string;
  };
  return {
    call,
    grpc,
    procs,
    cp,
    async dataplane(h, peers, priority) {
      const p = h.fulcrum(['dataplane', '--control-plane', grpc, '--state', join(o.dir, h.name), '--join', await token('dataplane', h),
        '--endpoint-source', h.ip, '--vrrp-interface', 'eth0', '--vrrp-peers', peers.map((x) => x.ip).join(','), '--vrrp-priority', String(priority)]);
      procs[h.name] = p;
      return p;
    },
    async agent(h, nodePool, nodeAddresses, extraArgs = []) {
      for (const ip of nodeAddresses) {
        const r = await h.exec('ip', ['addr', 'add', `${ip}/32`, 'dev', 'eth0']);
        if (r.code !== 0) throw new Error(`ip addr add ${ip} on ${h.name}: ${r.stderr}`);
      }
      const p = h.fulcrum(['agent', '--control-plane', grpc, '--state', join(o.dir, h.name), '--runtime', 'process', '--join', await token('agent', h), '--node-pool', nodePool, ...extraArgs]);
      procs[h.name] = p;
      return p;
    },
    async stopAll() {
      for (const [name, p] of Object.entries(procs)) {
        await p.stop();
        delete procs[name];
      }
      await cp.stop();
    },
  };
}

/** The six usable addresses of a /29 such as 198.18.158.0/29. */
export function sixOf(pool: string): string[] {
  const [base] = pool.split('/');
  const [a, b, c, d] = base!.split('.').map(Number);
  return [1, 2, 3, 4, 5, 6].map((i) => `${a}.${b}.${c}.${d! + i}`);
}

/** Waits for the agent on `h` to offer an engine and returns its id. */
export async function engineOf(fleet: Fleet, h: Host): Promise<string> {
  const a = await until(`the agent on ${h.name} offers an engine`, async () => {
    if (fleet.cp.proc.exitCode !== null || fleet.cp.proc.signalCode !== null) throw new Error(`control plane exited: ${fleet.cp.output().slice(-4000)}`);
    const r = await fleet.call('GET', '/v4/fulcrum/agents');
    return (r.body.data as { id: string; engines?: { id: string }[] }[]).find((x) => x.id === h.name && (x.engines?.length ?? 0) > 0);
  }, 120_000, 500);
  return a.engines![0]!.id;
}

export async function waitActive(fleet: Fleet, id: number, timeoutMs: number, explain: () => string): Promise<any> {
  return until(`database ${id} active`, async () => {
    if (fleet.cp.proc.exitCode !== null || fleet.cp.proc.signalCode !== null) throw new Error(`control plane exited: ${fleet.cp.output().slice(-4000)}`);
    const r = await fleet.call('GET', `${MYSQL}/${id}`);
    if (r.body.status === 'failed') throw new Error(`database ${id} failed: ${explain()}`);
    return r.body.status === 'active' ? r.body : undefined;
  }, timeoutMs, 500);
}

export async function holds(h: Host, ip: string): Promise<boolean> {
  return (await h.exec('ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.includes(` ${ip}/32 `);
}

export async function listensOn(h: Host, ip: string, port: number): Promise<boolean> {
  return (await h.exec('ss', ['-Hltn', `src ${ip}:${port}`])).stdout.includes(`${ip}:${port}`);
}

/** The names of the processes running in a host (its network namespace). */
export async function processesIn(h: Host): Promise<string[]> {
  const { stdout } = await h.exec('sh', ['-c', 'for p in $(ip netns pids "$1"); do cat /proc/$p/comm 2>/dev/null; done', 'sh', h.ns]);
  return stdout.split('\n').filter(Boolean);
}

/** Which of the two data planes holds `ip` once exactly one does. */
export async function holderOf(a: Host, b: Host, ip: string): Promise<Host> {
  return until(`one data plane holds ${ip}`, async () => {
    const [x, y] = [await holds(a, ip), await holds(b, ip)];
    return x !== y ? (x ? a : b) : undefined;
  }, 60_000, 200);
}

/**
 * mysql2 inside a host. `sql` mode runs the statements in argv and prints the last result as
 * JSON; `loop` mode inserts ids 1, 2, ... into fh.t, a new TLS connection per insert every 200 ms,
 * one JSON line per attempt (an insert is acknowledged when its line says ok).
 */
const MYSQL_CLIENT = `
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

export interface Attempt { id: number; start: number; end: number; ok: boolean; err?: string }

export interface MysqlClient {
  /** Runs statements through `host`; the last result, or undefined when anything failed. */
  sql(...stmts: string[]): Promise<any>;
  /** Starts the write loop into fh.t. */
  loop(): HostProcess;
}

/** mysql2 clients run inside `client`, talking to `host` (hosts.primary) with the database's credentials and CA. */
export async function mysqlClient(call: Fleet['call'], client: Host, id: number, host: string): Promise<MysqlClient> {
  const creds = (await call('GET', `${MYSQL}/${id}/credentials`)).body as { username: string; password: string };
  const ca = Buffer.from((await call('GET', `${MYSQL}/${id}/ssl`)).body.ca_certificate, 'base64').toString('utf8');
  const env = { ...process.env, DB_HOST: host, DB_USER: creds.username, DB_PASSWORD: creds.password, DB_CA: ca };
  return {
    async sql(...stmts) {
      const p = watch(client.spawn(process.execPath, ['-e', MYSQL_CLIENT, 'sql', ...stmts], { cwd: repoRoot, env }));
      const code = await new Promise<number | null>((ok) => p.proc.once('close', (c) => ok(c)));
      return code === 0 ? JSON.parse(p.output().trim().split('\n').at(-1)!) : undefined;
    },
    loop: () => watch(client.spawn(process.execPath, ['-e', MYSQL_CLIENT, 'loop'], { cwd: repoRoot, env })),
  };
}

export function attempts(p: HostProcess): Attempt[] {
  return p.output().split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Attempt);
}
