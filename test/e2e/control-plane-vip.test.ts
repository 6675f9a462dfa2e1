// e2e-lane: concurrent (its own netns prefix and subnet (helpers/hosts.ts), its own PostgreSQL cluster, keepalived state in its own folders).
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { execFileSync, spawn } from 'node:child_process';
import { chmodSync, chownSync, copyFileSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { repoRoot, runFulcrum, testRateLimitFlags, until } from '../helpers/lab.js';
import { createHosts, leftovers, printedJson, watch, type Host, type HostNet, type HostProcess } from '../helpers/hosts.js';
import { startPgCluster, type PgCluster } from '../helpers/postgres.js';
import { copyReplicaKeys } from '../helpers/replica-procs.js';

// "One address for the API" (docs/install.md) done as an operator does it, on two control-plane
// hosts built as network namespaces: a `fulcrum control-plane` replica on each (api-host 0.0.0.0,
// port 8080, one PostgreSQL, the same kek and pki), keepalived on each with the configuration and
// health check we ship (scripts/keepalived/), and a client calling the VIP every 100 ms. The
// holder's replica is SIGKILLed (its keepalived stays): the VIP moves and the API answers on it
// again; then the new holder's cable is cut and the VIP returns to the first host, whose replica
// was started again meanwhile; last, that replica hangs (SIGSTOP) and the VIP moves once more.
// Everything is removed after.

const PREFIX = 'fcvip';
const SUBNET = 91;
const VIP = `198.19.${SUBNET}.100`;
const API_PORT = 8080;
const SHIPPED = join(repoRoot, 'scripts', 'keepalived');
// keepalived runs the check as this user (enable_script_security); the doc's `fulcrum-check` user
// would have to be created on this shared machine and outlive the test, `nobody` exists already.
const CHECK_USER = 'nobody';

/**
 * How long the API may stay away from the VIP after its holder loses its replica or its link.
 * From the shipped settings: the check runs every 1 s (`interval 1`) and a dead replica refuses at
 * once, so the second failure (`fall 2`) comes at most 2 s after the kill; the holder then goes to
 * FAULT and sends a priority-0 advert, and the other host takes over after its skew time
 * ((256 - 100) / 256 * 0.5 s = 0.3 s), or, if that advert is lost, after the master-down interval
 * (3 * `advert_int 0.5` + 0.3 = 1.8 s); it then sends gratuitous ARP and the next request of the
 * loop (every 100 ms, 1 s timeout) gets through: 2 + 1.8 + 0.1 + 1 = about 5 s. A cut link skips
 * the check: 1.8 + 0.1 + 1 = about 3 s. Three times the larger figure for a loaded 2-core machine.
 */
const MOVE_BOUND_MS = 15_000;

/**
 * The same for a replica that hangs: each check then fails only by curl's `--max-time 2` (below
 * keepalived's `timeout 3`), and the next one starts at the next 1 s tick after it, so the second
 * failure comes at most (1 + 2) * 2 = 6 s after the hang; with the takeover and the client as
 * above, about 9 s. Two and a half times that on a loaded machine.
 */
const HANG_BOUND_MS = 25_000;

/** One request per line of output: when it started and ended (ms since epoch), and the status (0: no answer). */
interface Probe { start: number; end: number; status: number; err?: string }

/** The client: a new connection and `GET /v4/nodebalancers` on the VIP every 100 ms, 1 s deadline. */
const CLIENT_LOOP = `
const http = require('http');
const [ip, port, token] = process.argv.slice(1);
function once() {
  const start = Date.now();
  let done = false;
  const finish = (status, err) => { if (done) return; done = true; console.log(JSON.stringify({ start, end: Date.now(), status, err })); setTimeout(once, 100); };
  const req = http.get({ host: ip, port: Number(port), path: '/v4/nodebalancers', agent: false, timeout: 1000, headers: { authorization: 'Bearer ' + token } }, (res) => {
    res.resume(); res.on('end', () => finish(res.statusCode)); res.on('error', (e) => finish(0, e.code));
  });
  req.on('timeout', () => { req.destroy(); finish(0, 'timeout'); });
  req.on('error', (e) => finish(0, e.code || e.message));
}
once();
`;

function probes(p: HostProcess): Probe[] {
  return printedJson<Probe>(p);
}

/** One API call on a new connection (a kept-alive one could still point at the old holder). */
function call(url: string, token: string, method: string, path: string, body?: unknown): Promise<{ status: number; body: any }> {
  return new Promise((resolve, reject) => {
    const req = request(`${url}${path}`, { method, agent: false, timeout: 5_000, headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' } }, (res) => {
      let text = '';
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, body: text ? JSON.parse(text) : undefined }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.on('error', reject);
    req.end(body === undefined ? undefined : JSON.stringify(body));
  });
}

async function holds(h: Host): Promise<boolean> {
  return (await h.exec('ip', ['-4', '-o', 'addr', 'show', 'dev', 'eth0'])).stdout.includes(` ${VIP}/32 `);
}

/** The names of the processes running in a host (its network namespace). */
async function processesIn(h: Host): Promise<string[]> {
  const { stdout } = await h.exec('sh', ['-c', 'for p in $(ip netns pids "$1"); do cat /proc/$p/comm 2>/dev/null; done', 'sh', h.ns]);
  return stdout.split('\n').filter(Boolean);
}

/** `text` with `from` replaced by `to`, failing when the shipped file no longer has `from`. */
function edit(text: string, from: string, to: string): string {
  if (!text.includes(from)) throw new Error(`the shipped control-plane-vip.conf no longer contains ${JSON.stringify(from)}`);
  return text.replace(from, to);
}

/** The VRRP state keepalived last logged entering (MASTER, BACKUP, FAULT). */
function lastState(k: HostProcess): string | undefined {
  return [...k.output().matchAll(/Entering (\w+) STATE/g)].at(-1)?.[1];
}

describe('one address for the API: keepalived moves the VIP between control-plane replicas', () => {
  let net: HostNet;
  let dir: string;
  let pgc: PgCluster;
  let store: string;
  let admin = '';
  let cp1: Host, cp2: Host;
  const replicas: Record<string, HostProcess> = {};
  const keepaliveds: Record<string, HostProcess> = {};
  let loop: HostProcess | undefined;
  let passed = false;

  /** `fulcrum control-plane` on `h` as docs/install.md has it; resolves once it answers on its own address. */
  async function replica(h: Host): Promise<HostProcess> {
    const state = join(dir, h.name, 'state');
    const p = h.fulcrum(['control-plane', '--state', state, '--store', store, '--api-host', '0.0.0.0', '--api-insecure-listen', '--api-port', String(API_PORT),
      '--nodebalancer-pool', 'us-east=198.18.200.0/24', '--database-pool', 'us-east=198.18.201.0/24', ...testRateLimitFlags]);
    replicas[h.name] = p;
    await until(`the replica on ${h.name} started`, () => {
      if (p.proc.exitCode !== null) throw new Error(`the replica on ${h.name} exited: ${p.output().slice(-3000)}`);
      try {
        return (JSON.parse(readFileSync(join(state, 'control-plane.json'), 'utf8')) as { pid: number }).pid === p.proc.pid;
      } catch {
        return false;
      }
    }, 120_000, 200);
    admin ||= readFileSync(join(state, 'admin-token'), 'utf8').trim();
    await until(`the replica on ${h.name} answers on ${h.ip}`, async () => (await call(`http://${h.ip}:${API_PORT}`, admin, 'GET', '/v4/nodebalancers')).status === 200, 60_000, 200);
    return p;
  }

  /**
   * Steps 3-5 of docs/install.md on `h`: the check script installed 0755, the token's header file
   * owned by the check user and 0600, and keepalived.conf from the shipped file with this host's
   * interface, addresses, priority and VIP.
   */
  function installKeepalived(h: Host, peer: Host, priority: number, checkToken: string): HostProcess {
    // The check user must reach the script and the header: folders 0755, as /etc/keepalived is.
    const etc = join(dir, h.name, 'etc-keepalived');
    mkdirSync(etc, { recursive: true, mode: 0o755 });
    for (const d of [dir, join(dir, h.name), etc]) chmodSync(d, 0o755);
    const script = join(etc, 'fulcrum-api-check.sh');
    copyFileSync(join(SHIPPED, 'fulcrum-api-check.sh'), script);
    chmodSync(script, 0o755);
    const header = join(etc, 'fulcrum-api-check.header');
    writeFileSync(header, `Authorization: Bearer ${checkToken}\n`, { mode: 0o600 });
    chmodSync(header, 0o600);
    const uid = Number(execFileSync('id', ['-u', CHECK_USER]).toString().trim());
    chownSync(header, uid, -1);

    let conf = readFileSync(join(SHIPPED, 'control-plane-vip.conf'), 'utf8');
    conf = edit(conf, 'script_user fulcrum-check', `script_user ${CHECK_USER}`);
    conf = edit(conf, `script "/etc/keepalived/fulcrum-api-check.sh https://10.0.0.100:8080 /etc/keepalived/fulcrum-api-check.header /etc/fulcrum/tls/api-ca.crt"`,
      // The replicas here serve plain HTTP inside the test's hosts; the https form is checked in
      // test/integration/cli/control-plane-vip.test.ts.
      `script "${script} http://127.0.0.1:${API_PORT} ${header}"`);
    conf = edit(conf, 'interface eth0', `interface ${h.iface}`);
    conf = edit(conf, 'priority 150', `priority ${priority}`);
    conf = edit(conf, 'unicast_src_ip 10.0.0.10', `unicast_src_ip ${h.ip}`);
    conf = edit(conf, '        10.0.0.11 ', `        ${peer.ip} `);
    conf = edit(conf, '10.0.0.100/32 dev eth0', `${VIP}/32 dev ${h.iface}`);
    const file = join(etc, 'keepalived.conf');
    writeFileSync(file, conf, { mode: 0o644 });
    const k = watch(h.spawn('keepalived', ['--dont-fork', '--log-console', '--log-detail', '--vrrp', '-f', file,
      '-p', join(etc, 'keepalived.pid'), '-r', join(etc, 'vrrp.pid')]));
    keepaliveds[h.name] = k;
    return k;
  }

  beforeAll(async () => {
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-fcvip-'));
    net = await createHosts({ prefix: PREFIX, subnet: SUBNET, names: ['cp1', 'cp2'] });
    [cp1, cp2] = net.hosts as [Host, Host];
    // The replicas reach PostgreSQL on the root namespace's address on their bridge.
    pgc = await startPgCluster({ address: net.rootIp, trust: `198.19.${SUBNET}.0/24` });
    store = (await pgc.newDatabase()).replace('@127.0.0.1:', `@${net.rootIp}:`);
  }, 180_000);

  afterAll(async () => {
    // keepalived's own account of the states it went through, when something went wrong.
    if (!passed) for (const [name, k] of Object.entries(keepaliveds)) console.log(`[control-plane-vip] keepalived on ${name}:\n${k.output().slice(-6000)}`);
    await loop?.kill();
    for (const k of Object.values(keepaliveds)) await k.stop();
    for (const p of Object.values(replicas)) await p.kill();
    await net?.teardown();
    await pgc?.stop();
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('keeps the API on the VIP when the holder loses its replica or its link, and leaves nothing behind', async () => {
    // The first replica makes the kek, the CA and the admin token; the second gets copies.
    await replica(cp1);
    copyReplicaKeys(join(dir, cp1.name, 'state'), join(dir, cp2.name, 'state'));
    await replica(cp2);

    // Step 3: the check's token, made once, read-only on NodeBalancers.
    const made = runFulcrum(['token', 'create', '--state', join(dir, cp1.name, 'state'), '--store', store, '--label', 'vip-check', '--scopes', 'nodebalancers:read_only']);
    const created = watch(made);
    expect(await new Promise((r) => made.once('exit', r))).toBe(0);
    const checkToken = created.output().trim().split('\n').at(-1)!;
    expect(checkToken).toMatch(/^\S{16,}$/);
    // The check token cannot write.
    expect((await call(`http://${cp1.ip}:${API_PORT}`, checkToken, 'POST', '/v4/nodebalancers', { region: 'us-east', label: 'vip-denied' })).status).toBe(401);

    installKeepalived(cp1, cp2, 150, checkToken);
    installKeepalived(cp2, cp1, 100, checkToken);

    // Exactly one host takes the VIP.
    const holder = await until('one host holds the VIP', async () => {
      const [a, b] = [await holds(cp1), await holds(cp2)];
      return a !== b ? (a ? cp1 : cp2) : undefined;
    }, 60_000, 200);
    const other = holder === cp1 ? cp2 : cp1;
    // Both checks pass: the other host stands by rather than being in FAULT.
    await until(`${other.name} stands by`, () => lastState(keepaliveds[other.name]!) === 'BACKUP', 30_000, 200);
    expect(await holds(other)).toBe(false);
    /** Whether `h`'s replica answers what the check asks, with the check's token. */
    const checkPasses = async (h: Host) => (await call(`http://${h.ip}:${API_PORT}`, checkToken, 'GET', '/v4/nodebalancers?page_size=25')).status === 200;

    const vipUrl = `http://${VIP}:${API_PORT}`;
    // The client sits in the root namespace, on the bridge's network; a process of its own, so
    // that its timing does not depend on this test's event loop.
    loop = watch(spawn(process.execPath, ['-e', CLIENT_LOOP, VIP, String(API_PORT), admin], { stdio: ['ignore', 'pipe', 'pipe'] }));
    await until('the client gets answers on the VIP', () => probes(loop!).filter((p) => p.status === 200).length >= 3, 60_000, 100);
    const nb = await call(vipUrl, admin, 'POST', '/v4/nodebalancers', { region: 'us-east', label: 'before-the-kill' });
    expect(nb.status).toBe(200);

    /**
     * One call on the VIP once it answers: a connection made just as the VIP moves may reach the
     * host giving it up and be reset (`read ECONNRESET`), a failed attempt as the client loop
     * counts it, not the end of the test; how long the VIP was away is what the loop measures.
     */
    const onVip = (what: string, path: string) =>
      until(what, async () => {
        const r = await call(vipUrl, admin, 'GET', path);
        return r.status === 200 && r;
      }, MOVE_BOUND_MS * 2, 200);

    /**
     * How long after `t` (just before the fault was made) the API answered on the VIP again: the
     * end of the first 200 of a request begun after `done`, when the fault had surely taken effect
     * (the kill or `ip link set down` had returned). A request begun in between may still have
     * been answered by the old holder and proves nothing.
     */
    const recovery = async (what: string, t: number, done: number) => {
      const firstOk = await until(`a request begun after ${what} gets 200`, () => probes(loop!).find((p) => p.start > done && p.status === 200), MOVE_BOUND_MS * 2, 100);
      const failed = probes(loop!).filter((p) => p.start > t - 1000 && p.start < firstOk.start && p.status !== 200).length;
      const gap = firstOk.end - t;
      // What the measurement once counted by mistake: answers to requests begun while the fault was being made.
      const early = probes(loop!).filter((p) => p.start > t && p.start <= done && p.status === 200).length;
      console.log(`[control-plane-vip] ${what}: the API answered on the VIP again after ${gap} ms (${failed} requests failed in between; the fault took ${done - t} ms to make, ${early} requests begun meanwhile were answered)`);
      return gap;
    };

    // Case 1: the holder's replica is SIGKILLed; its host and keepalived stay up.
    const killedAt = Date.now();
    await replicas[holder.name]!.kill();
    const gap1 = await recovery(`SIGKILL of the replica on ${holder.name}`, killedAt, Date.now());
    expect(gap1).toBeLessThan(MOVE_BOUND_MS);
    await until(`${other.name} holds the VIP`, () => holds(other), 10_000, 100);
    expect(await holds(holder)).toBe(false);
    // It moved because the check failed, not because keepalived went away.
    await until(`${holder.name} is in FAULT`, () => lastState(keepaliveds[holder.name]!) === 'FAULT', 10_000, 100);
    expect(await processesIn(holder)).toContain('keepalived');
    // One store: what was made through the dead replica is listed through the live one.
    const listed = await onVip(`the API answers on the VIP through ${other.name}`, '/v4/nodebalancers');
    expect((listed.body.data as { id: number; label: string }[]).map((x) => [x.id, x.label])).toContainEqual([nb.body.id, 'before-the-kill']);

    // The replica comes back; once its check passes again its host stands by, and the VIP stays
    // where it is (nopreempt).
    expect(lastState(keepaliveds[holder.name]!)).toBe('FAULT');
    await replica(holder);
    await until(`${holder.name} stands by again`, () => lastState(keepaliveds[holder.name]!) === 'BACKUP', 30_000, 200);
    expect(await holds(other)).toBe(true);
    expect(await holds(holder)).toBe(false);

    // Case 2: the new holder's cable is cut; the VIP returns to the first host.
    const cutAt = Date.now();
    await other.linkDown();
    const gap2 = await recovery(`link down of ${other.name}`, cutAt, Date.now());
    expect(gap2).toBeLessThan(MOVE_BOUND_MS);
    // The answer came through the first host, so its keepalived took over; wait for its own account.
    await until(`${holder.name} is MASTER`, () => lastState(keepaliveds[holder.name]!) === 'MASTER', 10_000, 100);
    await until(`${holder.name} holds the VIP`, () => holds(holder), 10_000, 100);
    await other.linkUp();
    // Back on the network, the cut-off host does not take the VIP back: one holder.
    await until(`${other.name} gives up the VIP`, async () => !(await holds(other)), 30_000, 200);
    expect(await holds(holder)).toBe(true);
    const okAfter = Date.now();
    await until('the API still answers on the VIP', () => probes(loop!).some((p) => p.start > okAfter && p.status === 200), 30_000, 100);
    const again = await onVip(`the API answers on the VIP through ${holder.name}`, '/v4/nodebalancers');
    expect((again.body.data as { label: string }[]).map((x) => x.label)).toContain('before-the-kill');

    // Case 3: the holder's replica hangs (SIGSTOP: the kernel still accepts connections, nothing
    // answers). The check's 2 s timeout fails it and the VIP goes back to the other host, once
    // that one's replica reaches PostgreSQL again and its check passes.
    // Its replica lost PostgreSQL with the link, so its check failed for a while.
    await until(`${other.name} stands by after its link came back`, async () => lastState(keepaliveds[other.name]!) === 'BACKUP' && (await checkPasses(other)), 60_000, 200);
    const logBefore = keepaliveds[holder.name]!.output().length;
    const stoppedAt = Date.now();
    replicas[holder.name]!.proc.kill('SIGSTOP');
    const gap3 = await recovery(`SIGSTOP of the replica on ${holder.name}`, stoppedAt, Date.now());
    expect(gap3).toBeLessThan(HANG_BOUND_MS);
    await until(`${other.name} holds the VIP`, () => holds(other), 10_000, 100);
    expect(await holds(holder)).toBe(false);
    await until(`${holder.name} is in FAULT`, () => lastState(keepaliveds[holder.name]!) === 'FAULT', 10_000, 100);
    // curl's own --max-time ended the checks (exit 28), not keepalived's `timeout 3`.
    expect(keepaliveds[holder.name]!.output().slice(logBefore)).toContain('now returning 28');
    replicas[holder.name]!.proc.kill('SIGCONT');

    // keepalived's states in order on each host, for the log: whether the cut-off host went to
    // FAULT (and so never held the VIP on its return) or stayed MASTER.
    for (const [name, k] of Object.entries(keepaliveds)) console.log(`[control-plane-vip] ${name} states: ${[...k.output().matchAll(/Entering (\w+) STATE/g)].map((m) => m[1]).join(' -> ')}`);
    await loop.kill();
    loop = undefined;
    for (const h of [cp1, cp2]) {
      await keepaliveds[h.name]!.stop();
      await replicas[h.name]!.stop();
      // Only the `sh` that lists them is left.
      expect((await processesIn(h)).filter((n) => n !== 'sh')).toEqual([]);
    }
    await net.teardown();
    expect(await leftovers(PREFIX)).toEqual([]);
    passed = true;
  });
});
