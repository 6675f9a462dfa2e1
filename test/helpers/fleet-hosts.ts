/**
 * A Fulcrum fleet on network-namespace hosts (test/helpers/hosts.ts): a control plane, data planes
 * in pair mode and process-runtime agents joined with join tokens, plus mysql2 and HTTP clients
 * that run inside a host. Every process is a real `fulcrum` process; `stopAll()` stops them.
 * No vitest here: bench/provision/replace.ts runs this fleet under plain Node.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { api, repoRoot, testRateLimits, until } from './lab.js';
import { createHosts, type Host, type HostNet, type HostProcess } from './hosts.js';
import { MYSQL, attempts, mysqlClient, type MysqlClient } from './fleet-clients.js';
import { startObjectStore, type ObjectStore } from './object-store.js';

/** The databases' API path (fleet-clients.ts holds it: it needs it and imports nothing from here at run time). */
export { MYSQL };

/** Throws unless an API answer is a 200 (what `expect(r.status).toBe(200)` said, without vitest). */
function okStatus(r: { status: number; body: unknown }, what: string): void {
  if (r.status !== 200) throw new Error(`${what}: HTTP ${r.status} ${JSON.stringify(r.body)}`);
}

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
    okStatus(t, `join token for ${h.name}`);
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

/** How long a fleet's close waits for its processes to stop on SIGTERM before the teardown. */
const CLEAN_STOP_MS = 30_000;

/** The hosts of a database fleet test: a control plane, a data plane pair, agent hosts and a client. */
export interface HostsFleet {
  net: HostNet;
  /** The test's temporary folder: the control plane's state in `cp`, each host's in its name. */
  dir: string;
  fleet: Fleet;
  dpa: Host;
  dpb: Host;
  cl: Host;
  agents: Host[];
  /** The object store every agent shares, when one was asked for. */
  store?: ObjectStore;
  /** The agent host whose node pool holds a member's address. */
  hostOf(ip: string): Host | undefined;
  /**
   * The tails of the control plane's and the agents' output (for onTestFailed), and the path of a
   * file outside the test's folder with every process's whole output (control plane, data planes,
   * agents): the tails alone lost how a CI failure began.
   */
  explain(): string;
  /** Stops every process, removes the hosts and the folder (idempotent; afterAll). */
  close(): Promise<void>;
}

/**
 * Builds the hosts ('cp', 'dpa', 'dpb', one per `nodePools` entry, 'cl') under the test file's
 * own netns prefix and subnet, starts the control plane, the data plane pair (dpa first in the
 * election) and one process-runtime agent per host whose members listen on its /29 node pool.
 */
export async function startHostsFleet(o: {
  prefix: string; subnet: number; nbPool: string; dbPool: string; nodePools: Record<string, string>;
  /** More arguments for every agent, such as `--engines FILE` (test/helpers/image-engine.ts). */
  agentArgs?: string[];
  /**
   * A real object store (Swift + s3api over TLS, on the bridge's root address) that every agent
   * backs up to, archiving its binlogs every `archiveS` seconds.
   */
  store?: { archiveS: number };
}): Promise<HostsFleet> {
  const dir = mkdtempSync(join(tmpdir(), `fulcrum-${o.prefix}-`));
  const names = Object.keys(o.nodePools);
  const net = await createHosts({ prefix: o.prefix, subnet: o.subnet, names: ['cp', 'dpa', 'dpb', ...names, 'cl'] });
  const [cpHost, dpa, dpb, ...rest] = net.hosts as Host[];
  const cl = rest.pop()!;
  const agents = rest;
  let fleet: Fleet | undefined;
  let store: ObjectStore | undefined;
  const close = async () => {
    // A process that ignores SIGTERM holds the clean stop no longer than this (a bench stopped by
    // a signal has a bound of its own): the teardown below SIGKILLs what is left in the hosts.
    await Promise.race([fleet?.stopAll(), new Promise((r) => setTimeout(r, CLEAN_STOP_MS).unref())]);
    await net.teardown();
    await store?.stop();
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    const args = [...(o.agentArgs ?? [])];
    if (o.store) {
      store = await startObjectStore({ host: net.rootIp });
      args.push('--backup-store', `s3://${store.bucket}/us-east`, '--backup-store-endpoint', store.endpoint, '--backup-store-region', store.region,
        '--backup-store-path-style', '--backup-store-ca', store.caFile, '--backup-store-credentials', store.credentialsFile, '--binlog-archive-interval', String(o.store.archiveS));
    }
    fleet = await startFleet({ cpHost: cpHost!, dir, nbPool: o.nbPool, dbPool: o.dbPool });
    await fleet.dataplane(dpa!, [dpb!], 150);
    await fleet.dataplane(dpb!, [dpa!], 100);
    for (const h of agents) await fleet.agent(h, o.nodePools[h.name]!, sixOf(o.nodePools[h.name]!), args);
  } catch (err) {
    await close();
    throw err;
  }
  const f = fleet;
  return {
    net, dir, fleet: f, dpa: dpa!, dpb: dpb!, cl, agents, ...(store ? { store } : {}),
    hostOf: (ip) => agents.find((h) => sixOf(o.nodePools[h.name]!).includes(ip)),
    explain: () => {
      const whole = join(tmpdir(), `fulcrum-${o.prefix}-failure-${Date.now()}.log`);
      writeFileSync(whole, [['cp', f.cp] as const, ...Object.entries(f.procs)].map(([name, p]) => `== ${name}\n${p.output()}`).join('\n'), { mode: 0o600 });
      return `[control plane output]\n${f.cp.output().slice(-6000)}\n[agents]\n${agents.map((h) => `-- ${h.name}\n${f.procs[h.name]?.output().slice(-3000)}`).join('\n')}\n[every process's whole output: ${whole}]`;
    },
    close,
  };
}

/** A 3-node semi_synch database spread over three hosts, with a write loop running through hosts.primary. */
export interface SpreadUnderWrites {
  id: number;
  /** The database as the API showed it once its three members sat on three hosts. */
  db: any;
  /** The primary member's address then. */
  oldPrimary: string;
  /** hosts.primary. */
  primary: string;
  client: MysqlClient;
  loop: HostProcess;
}

/**
 * Creates a 3-node semi_synch database (of `engine`, else the first engine the first agent
 * offers) once `agentCount` agents that run members across hosts are
 * connected, waits until it is active with three members on three hosts and both data planes
 * listen on hosts.primary, creates fh.t and starts the write loop from the client host.
 */
export async function spreadUnderWrites(f: HostsFleet, label: string, agentCount = f.agents.length, engine?: string): Promise<SpreadUnderWrites> {
  const { call, procs } = f.fleet;
  await until(`${agentCount} agents that run members across hosts`, async () => {
    const r = await call('GET', '/v4/fulcrum/agents');
    return (r.body.data as { connected: boolean; membersAcrossHosts: boolean }[]).filter((a) => a.connected && a.membersAcrossHosts).length >= agentCount;
  }, 120_000, 500);
  const created = await call('POST', MYSQL, {
    label, region: 'us-east', type: 'g6-nanode-1', engine: engine ?? await engineOf(f.fleet, f.agents[0]!), cluster_size: 3, replication_type: 'semi_synch', allow_list: [`${f.cl.ip}/32`],
  });
  okStatus(created, `create ${label}`);
  const id: number = created.body.id;
  await waitActive(f.fleet, id, 600_000, () => f.agents.map((h) => procs[h.name]!.output().slice(-2000)).join('\n'));
  const db = await until('three members on three hosts', async () => {
    const r = await call('GET', `${MYSQL}/${id}`);
    const m = Object.keys(r.body.members ?? {});
    return m.length === 3 && new Set(m.map((x) => f.hostOf(x)?.name)).size === 3 ? r.body : undefined;
  }, 60_000, 500);
  const oldPrimary = Object.keys(db.members).find((m) => db.members[m] === 'primary')!;
  const primary: string = db.hosts.primary;
  await until('both data planes listen on hosts.primary', async () => (await listensOn(f.dpa, primary, 3306)) && (await listensOn(f.dpb, primary, 3306)), 120_000, 250);
  await holderOf(f.dpa, f.dpb, primary);
  const client = await mysqlClient(call, f.cl, id, primary);
  await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
  const loop = client.loop();
  await until('writes through hosts.primary', () => attempts(loop).filter((a) => a.ok).length >= 5, 60_000, 100);
  return { id, db, oldPrimary, primary, client, loop };
}

/** A 1-node database on one agent host, with a write loop running through hosts.primary. */
export interface SingleUnderWrites {
  id: number;
  /** The database as the API showed it once active. */
  db: any;
  /** The agent host it runs on, and another one. */
  host: Host;
  other: Host;
  /** hosts.primary. */
  primary: string;
  /** Its credentials then (the client keeps them for the whole test). */
  creds: unknown;
  client: MysqlClient;
  loop: HostProcess;
}

/**
 * Creates a 1-node database once every agent is connected, waits until it is active on one agent
 * host and both data planes listen on hosts.primary, creates fh.t and starts the write loop from
 * the client host.
 */
export async function singleUnderWrites(f: HostsFleet, label: string): Promise<SingleUnderWrites> {
  const { call } = f.fleet;
  await until(`${f.agents.length} agents connected`, async () => {
    const r = await call('GET', '/v4/fulcrum/agents');
    return (r.body.data as { connected: boolean }[]).filter((a) => a.connected).length === f.agents.length;
  }, 120_000, 500);
  const created = await call('POST', MYSQL, {
    label, region: 'us-east', type: 'g6-nanode-1', engine: await engineOf(f.fleet, f.agents[0]!), cluster_size: 1, allow_list: [`${f.cl.ip}/32`],
  });
  okStatus(created, `create ${label}`);
  const id: number = created.body.id;
  const db = await until(`database ${id} active on one agent host`, async () => {
    const r = await call('GET', `${MYSQL}/${id}`);
    if (r.body.status === 'failed') throw new Error(`database ${id} failed`);
    const m = Object.keys(r.body.members ?? {});
    return r.body.status === 'active' && m.length === 1 && f.hostOf(m[0]!) ? r.body : undefined;
  }, 600_000, 500);
  const host = f.hostOf(Object.keys(db.members)[0]!)!;
  const other = f.agents.find((h) => h !== host)!;
  const primary: string = db.hosts.primary;
  const creds = (await call('GET', `${MYSQL}/${id}/credentials`)).body;
  await until('both data planes listen on hosts.primary', async () => (await listensOn(f.dpa, primary, 3306)) && (await listensOn(f.dpb, primary, 3306)), 120_000, 250);
  await holderOf(f.dpa, f.dpb, primary);
  const client = await mysqlClient(call, f.cl, id, primary);
  await until('a table through hosts.primary', () => client.sql('CREATE DATABASE IF NOT EXISTS fh', 'CREATE TABLE IF NOT EXISTS fh.t (id INT PRIMARY KEY)', 'SELECT 1 AS one'), 120_000, 1000);
  const loop = client.loop();
  return { id, db, host, other, primary, creds, client, loop };
}

/** `fulcrum <args>` from the sources in the root namespace (the control plane's state folder is here). */
export function fulcrumCli(args: string[]): Promise<string> {
  return new Promise((ok, fail) => {
    execFile(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), ...args], { cwd: repoRoot, env: { ...process.env, FULCRUM_FROM_SOURCE: '1' }, timeout: 60_000 }, (err, stdout, stderr) => {
      if (err) fail(new Error(`fulcrum ${args.join(' ')}: ${stderr || err.message}`));
      else ok(stdout);
    });
  });
}
